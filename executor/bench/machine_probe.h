// Which machine a benchmark ran on: rank 0's host name and processor, how many nodes, and each rank's node.
#pragma once

#include <mpi.h>

#include <vector>

#include "calibration.h"

namespace shardplan::bench {

struct BenchMachine {
  MachineInfo info;
  std::vector<int> node_of_rank;  // world rank → node index, nodes numbered in order of their first rank
};

// Collective over `world`: ranks with the same host name (gethostname) share a node, as mpirun places them.
BenchMachine probe_machine(MPI_Comm world);

// The processor's model name from /proc/cpuinfo, or "" where there is none (not Linux, or no such line).
std::string cpu_model_name();

}  // namespace shardplan::bench
