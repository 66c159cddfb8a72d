"""The simulation programs whose loops update neighbours' elements, scatter into shared ones, or fuse
with loops reading what they wrote, run again with every parallel loop from its last index to its
first, on one thread (`BRAZE_ENABLE=reverse_parallel`). In increasing order a wrong merge of two
loops or an update wrongly taken for a thread's own can still give the right answer on the CPU, where
on a GPU it is a data race; each program must match its reference in either order."""

import pytest
import test_sim_programs as sim1
import test_sim_programs2 as sim2
import test_sim_programs3 as sim3
import test_sim_programs4 as sim4
import test_sim_programs5 as sim5

from braze import config

PROGRAMS = [
    sim1.test_springs, sim1.test_springs_vec, sim1.test_sph, sim1.test_p2g, sim1.test_hist, sim1.test_wave,
    sim2.test_cloth_grid_of_springs_with_pinned_corners, sim2.test_particle_in_cell_deposit_and_gather,
    sim2.test_binning_particles_into_cells_by_atomic_slots, sim2.test_red_black_gauss_seidel_poisson_solve,
    sim3.test_xpbd_distance_constraints_with_jacobi_averaging, sim3.test_grid_neighbour_search_by_counting_sort,
    sim4.test_linear_triangle_elements_assembled_by_atomic_scatter,
    sim4.test_damped_chain_of_springs_fused_unfused_and_swapping_buffers,
    sim5.test_mls_mpm_substep_with_apic_and_quadratic_weights, sim5.test_fdtd_on_a_staggered_yee_grid,
]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda program: program.__name__.removeprefix("test_"))
def test_in_decreasing_order(program, where):
    if where.name != "cpu":
        pytest.skip("the order of the CPU's loops")
    with config.scope(enable="poison_outputs,reverse_parallel"):
        program(where)
