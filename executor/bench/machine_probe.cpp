// Probing the machine: host names gathered over MPI, nodes by host name, the CPU model from /proc/cpuinfo.
#include "machine_probe.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <string>

#include "mpi_check.h"

namespace shardplan::bench {
namespace {

constexpr int kHostNameBytes = 256;  // POSIX HOST_NAME_MAX is 255 on Linux; one more for the terminator

}  // namespace

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (!line.starts_with("model name")) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const auto first = line.find_first_not_of(" \t", colon + 1);
    return first == std::string::npos ? std::string() : line.substr(first);
  }
  return {};
}

BenchMachine probe_machine(MPI_Comm world) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  MPI_CHECK(MPI_Comm_size(world, &size));
  std::array<char, kHostNameBytes> mine{};
  if (::gethostname(mine.data(), mine.size() - 1) != 0) std::copy_n("unknown", 8, mine.data());
  std::vector<char> all(static_cast<std::size_t>(size) * kHostNameBytes);
  MPI_CHECK(MPI_Allgather(mine.data(), kHostNameBytes, MPI_CHAR, all.data(), kHostNameBytes, MPI_CHAR, world));
  BenchMachine machine;
  std::vector<std::string> hosts;
  for (int r = 0; r < size; ++r) {
    const std::string host(all.data() + static_cast<std::size_t>(r) * kHostNameBytes);
    auto found = std::find(hosts.begin(), hosts.end(), host);
    if (found == hosts.end()) found = hosts.insert(hosts.end(), host);
    machine.node_of_rank.push_back(static_cast<int>(found - hosts.begin()));
  }
  machine.info.host = hosts.front();
  machine.info.cpu = cpu_model_name();
  machine.info.nodes = static_cast<int>(hosts.size());
  machine.info.ranks = size;
  return machine;
}

}  // namespace shardplan::bench
