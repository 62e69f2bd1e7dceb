"""Physics model: technology energies, TDP, hardware registry, workload counts, prediction."""
