// The CPU runner's context parallelism: ring steps on the CP communicator and a CP rank's share of a batch (Note
// [Context-parallel runner]).
#include "context_parallel_runner.h"

#include <string>

#include "errors.h"

namespace shardplan::runner {

int CommContextParallelGroup::start_ring_step(std::span<const float> send, std::span<float> recv, Channel channel) {
  SHARDPLAN_CHECK(send.size() == recv.size(), "CP ring step sizes");
  const int next = (rank() + 1) % degree(), previous = (rank() + degree() - 1) % degree();
  // One tag per channel: backward's K/V and dK/dV steps between the same two ranks are in flight together.
  const int tag = static_cast<int>(channel);
  Step step;
  step.recv = comm_->recv(recv.data(), recv.size(), previous, tag);
  step.send = comm_->send(send.data(), send.size(), next, tag);
  in_flight_.emplace(next_id_, std::move(step));
  return next_id_++;
}

void CommContextParallelGroup::wait_ring_step(int id) {
  const auto found = in_flight_.find(id);
  SHARDPLAN_CHECK(found != in_flight_.end(), "CP ring step " + std::to_string(id) + " is not in flight");
  while (!found->second.send.test()) runtime::poll(progress_);
  while (!found->second.recv.test()) runtime::poll(progress_);
  in_flight_.erase(found);
}

runtime::Batch context_parallel_share(const runtime::Batch& batch, int degree, int rank) {
  const std::vector<std::int64_t> positions = runtime::load_balanced_positions(batch.seq_len, degree, rank);
  runtime::Batch share;
  share.micro_batch = batch.micro_batch;
  share.seq_len = static_cast<int>(positions.size());
  for (int sequence = 0; sequence < batch.micro_batch; ++sequence) {
    const std::size_t first = static_cast<std::size_t>(sequence) * static_cast<std::size_t>(batch.seq_len);
    for (const std::int64_t position : positions) {
      share.tokens.push_back(batch.tokens.at(first + static_cast<std::size_t>(position)));
      share.targets.push_back(batch.targets.at(first + static_cast<std::size_t>(position)));
    }
  }
  return share;
}

}  // namespace shardplan::runner
