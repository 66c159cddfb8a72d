import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
data = collections.OrderedDict()
for r in rows:
    if len(r) < 16 or r[0] == "ID":
        continue
    data.setdefault((r[0], r[4][:36]), {})[r[12]] = r[14]
want = ["Duration", "DRAM Throughput", "Compute (SM) Throughput", "Registers Per Thread", "Grid Size", "Block Size",
        "Achieved Occupancy", "Theoretical Occupancy", "Warp Cycles Per Issued Instruction"]
print("id kernel |", " | ".join(w.split()[0] for w in want))
for (i, n), m in data.items():
    print(i, n, "|", " | ".join(m.get(w, "?") for w in want))
