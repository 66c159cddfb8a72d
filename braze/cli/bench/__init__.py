"""`braze bench`: the fusion suite (fusions from real models, braze against torch eager,
torch.compile and JAX on a GPU, or against NumPy on the CPU; suite.py), its cases (cases.py), their
checks against a float64 reference (check.py) and its report (report.py)."""
