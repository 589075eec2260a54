// memory_classes (Note [Memory classes] in wrap_micro_classes.h): micro-batches grouped by their fragments' memory
// figures.
#include "wrap_micro_classes.h"

namespace shardplan::wrap_internal {

namespace {

// What memory_term and the label updates read of an idle placement.
bool same_timing(const FragmentTiming& a, const FragmentTiming& b) {
  return a.peak_bytes == b.peak_bytes && a.exact == b.exact && a.early_streams == b.early_streams;
}

template <class T, class Same>
bool same_at(const std::vector<T>& values, std::size_t a, std::size_t b, Same same) {
  return a < values.size() && b < values.size() && same(values[a], values[b]);
}

bool same_edge_micro(const EdgeFragments& edge, std::size_t a, std::size_t b) {
  const auto certain = [](const Fragment& x, const Fragment& y) { return x.certain_peak_bytes == y.certain_peak_bytes; };
  const auto equal = [](std::int64_t x, std::int64_t y) { return x == y; };
  return same_at(edge.start, a, b, certain) && same_at(edge.head, a, b, certain) &&
         same_at(edge.last_forward, a, b, certain) && same_at(edge.turn, a, b, certain) &&
         same_at(edge.close, a, b, certain) && same_at(edge.start_idle, a, b, same_timing) &&
         same_at(edge.head_idle, a, b, same_timing) && same_at(edge.last_forward_idle, a, b, same_timing) &&
         same_at(edge.turn_idle, a, b, same_timing) && same_at(edge.close_idle, a, b, same_timing) &&
         same_at(edge.before, a, b, equal) && same_at(edge.span, a, b, equal) && same_at(edge.after, a, b, equal);
}

bool same_pair_micro(const PairFragments& pair, std::size_t a, std::size_t b) {
  if (a >= pair.micro.size() || b >= pair.micro.size()) return false;
  const PairFragments::Micro& x = pair.micro[a];
  const PairFragments::Micro& y = pair.micro[b];
  return x.forward_left_certain == y.forward_left_certain && x.backward_right_certain == y.backward_right_certain &&
         same_timing(x.forward_left_idle, y.forward_left_idle) &&
         same_timing(x.backward_right_idle, y.backward_right_idle);
}

}  // namespace

MicroClasses memory_classes(int micro_batches, const std::vector<const EdgeFragments*>& edges,
                            const std::vector<const PairFragments*>& pairs) {
  MicroClasses classes;
  const auto micros = static_cast<std::size_t>(std::max(1, micro_batches));
  classes.class_of.assign(micros, 0);
  const auto same = [&](std::size_t a, std::size_t b) {
    for (const EdgeFragments* edge : edges) {
      if (!same_edge_micro(*edge, a, b)) return false;
    }
    for (const PairFragments* pair : pairs) {
      if (!same_pair_micro(*pair, a, b)) return false;
    }
    return true;
  };
  for (std::size_t micro = 0; micro < micros; ++micro) {
    std::size_t found = classes.count();
    if (micro + 1 < micros) {  // the last micro-batch's backward is placed from the label's state: its own class
      // The previous micro-batch's class first: the middle ones of a step are alike, and a mismatch shows early.
      if (micro > 0) {
        const std::size_t previous = classes.class_of[micro - 1];
        if (same(micro, static_cast<std::size_t>(classes.first_micro[previous]))) found = previous;
      }
      for (std::size_t c = 0; c < classes.count() && found == classes.count(); ++c) {
        if (same(micro, static_cast<std::size_t>(classes.first_micro[c]))) found = c;
      }
    }
    if (found == classes.count()) classes.first_micro.push_back(static_cast<int>(micro));
    classes.class_of[micro] = found;
  }
  return classes;
}

}  // namespace shardplan::wrap_internal
