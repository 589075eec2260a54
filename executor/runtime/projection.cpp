// Linear projections with an optional LoRA adapter (Note [LoRA projection]) as Eigen GEMMs over row-major maps.
#include "projection.h"

#include "aligned_products.h"
#include "errors.h"

namespace shardplan::runtime {
namespace {

const float* data_or_null(const LayerParams& params, const std::string& name) {
  const BoundTensor* found = params.find(name);
  return found != nullptr ? found->data : nullptr;
}

float* grad_or_null(const LayerParams& grads, const std::string& name) {
  const BoundTensor* found = grads.find(name);
  return found != nullptr ? found->data : nullptr;
}

struct Adapter {
  const float* a = nullptr;  // [r × in]
  const float* b = nullptr;  // [out × r]
  std::int64_t rank = 0;
};

Adapter adapter_of(const LayerParams& params, const std::string& module, const LinearShape& shape) {
  const BoundTensor* a = params.find(module + ".lora_A.weight");
  const BoundTensor* b = params.find(module + ".lora_B.weight");
  if (a == nullptr && b == nullptr) return {};
  SHARDPLAN_CHECK(a != nullptr && b != nullptr && a->shape.size() == 2 && b->shape.size() == 2 &&
                      a->shape[1] == shape.in_features && b->shape[0] == shape.out_features &&
                      a->shape[0] == b->shape[1],
                  "projection '" + module + "': LoRA adapters missing or of the wrong shapes");
  return {a->data, b->data, a->shape[0]};
}

}  // namespace

void projection_forward(const DecoderDims& dims, const LayerParams& params, const std::string& module,
                        const LinearShape& shape, const float* x, SavedActivations& saved, float* y) {
  linear_forward(shape, x, params.tensor(module + ".weight"), data_or_null(params, module + ".bias"), y);
  const Adapter adapter = adapter_of(params, module, shape);
  if (adapter.rank == 0) return;
  const std::int64_t rows = shape.rows, r = adapter.rank;
  std::vector<float>& u = saved.put(module + ".lora_A.out", std::vector<float>(static_cast<std::size_t>(rows * r)));
  MatrixView U(u.data(), rows, r);
  assign_product(U, ConstMatrixView(x, rows, shape.in_features) *
                        ConstMatrixView(adapter.a, r, shape.in_features).transpose());  // Note [Aligned products]
  const RowMatrix z = U * ConstMatrixView(adapter.b, shape.out_features, r).transpose();
  MatrixView(y, rows, shape.out_features) += z * static_cast<float>(dims.lora_scaling);
}

void projection_backward(const DecoderDims& dims, const LayerParams& params, const std::string& module,
                         const LinearShape& shape, const float* x, const SavedActivations& saved, const float* dy,
                         float* dx, bool accumulate_dx, const LayerParams& grads) {
  linear_backward(shape, x, params.tensor(module + ".weight"), dy, dx, accumulate_dx,
                  grad_or_null(grads, module + ".weight"), grad_or_null(grads, module + ".bias"));
  const Adapter adapter = adapter_of(params, module, shape);
  if (adapter.rank == 0) return;
  const std::int64_t rows = shape.rows, r = adapter.rank, in = shape.in_features, out = shape.out_features;
  const RowMatrix dz = ConstMatrixView(dy, rows, out) * static_cast<float>(dims.lora_scaling);
  ConstMatrixView U(saved.get(module + ".lora_A.out").data(), rows, r);
  ConstMatrixView X(x, rows, in);
  if (float* grad_b = grad_or_null(grads, module + ".lora_B.weight")) {
    add_product(MatrixView(grad_b, out, r), dz.transpose() * U);
  }
  const RowMatrix du = dz * ConstMatrixView(adapter.b, out, r);
  if (float* grad_a = grad_or_null(grads, module + ".lora_A.weight")) {
    add_product(MatrixView(grad_a, r, in), du.transpose() * X);
  }
  add_product(MatrixView(dx, rows, in), du * ConstMatrixView(adapter.a, r, in));
}

}  // namespace shardplan::runtime
