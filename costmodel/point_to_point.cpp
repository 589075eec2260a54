// point_to_point_time_s: a send/recv priced as the 2-rank all-gather that moves the same bytes (Note
// [Point-to-point cost] in point_to_point.h).
#include "point_to_point.h"

#include "collective_cost.h"

namespace shardplan {

double point_to_point_time_s(std::int64_t bytes, bool crosses_nodes, const HardwareProfile& profile) {
  if (bytes <= 0) return 0.0;
  const GroupPlacement pair{2, crosses_nodes, crosses_nodes ? 1 : 2};
  return collective_cost(CollectiveKind::all_gather, 2 * bytes, pair, profile).time_s;
}

}  // namespace shardplan
