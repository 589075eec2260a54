// `shardplan run` on GPUs: one process per GPU under mpirun, NCCL for the plan's collectives, MPI for bootstrap
// and control; the same dataset, plan, trace and summary as the CPU executor.
#include <mpi.h>

#include <cstdio>

#include "byte_text_dataset.h"
#include "data_parallel_batches.h"
#include "device_probe.h"
#include "errors.h"
#include "gpu_runner.h"
#include "model_source.h"
#include "mpi_communicator.h"
#include "mpi_session.h"
#include "nccl_bootstrap.h"
#include "nccl_communicator.h"
#include "run_support.h"

namespace shardplan::cli {

int run_on_gpu(const RunFlags& flags) {
  const gpu::DeviceProbe probe = gpu::probe_devices();
  if (!probe.usable()) throw InputError("--device gpu: no usable CUDA device (" + probe.reason + ")");
  comm::MpiSession session;
  comm::MpiCommunicator control(MPI_COMM_WORLD);
  const int size = control.size();
  const bool lead = control.rank() == 0;
  const ModelSpec model = load_model(flags.model);
  const Plan plan = run_plan(flags, model, size);
  if (flags.steps < 1) throw InputError("--steps: expected at least 1, got " + std::to_string(flags.steps));
  if (!flags.checkpoint_dir.empty() || flags.resume) {
    throw InputError("--checkpoint-dir/--resume: checkpoints are written by the CPU executor only (use --device cpu)");
  }
  runtime::ByteTextDatasetOptions data_options;
  data_options.path = flags.data_file;
  data_options.micro_batch = static_cast<int>(plan.training.micro_batch);
  data_options.seq_len = static_cast<int>(plan.training.seq_len);
  const runtime::ByteTextDataset data(data_options);

  const gpu::LocalDevice device = gpu::bind_local_device(MPI_COMM_WORLD);
  if (device.shared()) {
    throw InputError(std::to_string(device.local_size) + " ranks on this host but " +
                     std::to_string(device.device_count) + " CUDA device(s): NCCL needs one device per rank");
  }
  gpu::NcclCommunicator world(MPI_COMM_WORLD);
  // Note [Step watchdog]: on expiry NcclCommunicator::abort runs ncclCommAbort, so no NCCL kernel keeps spinning on a
  // stopped peer, then MPI_Abort. The prediction uses the catalog's H100 whatever the device (CUDA names it "NVIDIA
  // H200", not a catalog name); 50 predicted steps leave room for any slower GPU.
  const auto watchdog = start_watchdog(
      run_watchdog_timeout_s(flags, {plan}, model, "1x" + std::to_string(size) + "xH100-80GB"), world,
      [&world](const std::string&) { world.abort("stopped by the watchdog (the line above)"); });
  if (watchdog) control.set_wait_observer(watchdog);
  gpu::GpuRunnerOptions options;
  options.seed = flags.seed;
  gpu::GpuRunner runner(model, plan, world, control, options);
  const int k = runner.schedule().micro_batches;
  if (lead && !flags.json) {
    std::printf("GPU executor: %d rank(s), device %d of %d on rank 0, plan '%s' in %s\n", size, device.device,
                device.device_count, plan.name.c_str(), plan.training.precision.name.c_str());
  }
  RunOutcome outcome;
  outcome.executor = "gpu";
  outcome.keep_timelines = !flags.trace_file.empty();
  outcome.world_size = size;
  runner::StepReport& last = outcome.last;
  try {
    for (std::int64_t step = 0; step < flags.steps; ++step) {
      const comm::WatchedPhase phase(watchdog.get(), "step " + std::to_string(step));
      outcome.add_step(step, runner.step(runner::rank_micro_batches(data, step, k, size, control.rank())));
      if (lead && !flags.json) print_step_line(step, last);
    }
    const comm::WatchedPhase phase(watchdog.get(), "trace merge");
    write_run_trace(flags, plan, model, outcome, control.native(), size);
  } catch (const std::exception& error) {
    if (size == 1) {  // Note [Aborted status], as run_on_cpu
      std::fprintf(stderr, "shardplan: run aborted: %s\n", Error::one_line(error.what()).c_str());
      return comm::kExitAborted;
    }
    world.abort(std::string("shardplan run: ") + error.what());
  }
  if (lead) print_run_outcome(flags, model, plan, outcome);
  return 0;
}

}  // namespace shardplan::cli
