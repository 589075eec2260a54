// RMSNorm forward/backward math and the final-norm layer kernel ("model.norm").
#include "rmsnorm.h"

#include <cmath>

#include "aligned_products.h"
#include "errors.h"
#include "layer_kernel.h"
#include "row_reductions.h"

namespace shardplan::runtime {

void rmsnorm_forward(const float* x, const float* weight, std::int64_t rows, std::int64_t width, double eps, float* y,
                     float* inv_rms) {
  ConstMatrixView X(x, rows, width);
  for (std::int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * width;  // mean of squares in fixed order (Note [Deterministic reductions])
    const double mean_square = row_dot(xr, xr, width) / static_cast<double>(width);
    inv_rms[row] = static_cast<float>(1.0 / std::sqrt(mean_square + eps));
  }
  ConstVectorView r(inv_rms, rows);
  MatrixView Y(y, rows, width);
  Y = (X.array().colwise() * r.array()).rowwise() * ConstVectorView(weight, width).transpose().array();
}

void rmsnorm_backward(const float* x, const float* inv_rms, const float* weight, const float* dy, std::int64_t rows,
                      std::int64_t width, float* dx, float* grad_weight) {
  ConstMatrixView X(x, rows, width);
  ConstMatrixView dY(dy, rows, width);
  ConstVectorView r(inv_rms, rows);
  const RowMatrix x_hat = X.array().colwise() * r.array();
  if (grad_weight != nullptr) {
    add_column_sums(grad_weight, (dY.array() * x_hat.array()).matrix());  // Note [Aligned products]
  }
  const RowMatrix g = dY.array().rowwise() * ConstVectorView(weight, width).transpose().array();
  Eigen::VectorXf mean_g_xhat(rows);
  for (std::int64_t row = 0; row < rows; ++row) {
    mean_g_xhat[row] = static_cast<float>(row_dot(g.row(row).data(), x_hat.row(row).data(), width) /
                                          static_cast<double>(width));
  }
  MatrixView dX(dx, rows, width);
  dX.array() += (g.array() - x_hat.array().colwise() * mean_g_xhat.array()).colwise() * r.array();
}

namespace {

// The final norm before the LM head: one weight vector of hidden_size.
class RMSNormLayer final : public LayerKernel {
 public:
  explicit RMSNormLayer(const DecoderDims& dims) : dims_(dims) {}
  LayerKind kind() const override { return LayerKind::norm; }
  const char* kernel_name() const override { return "rmsnorm"; }
  std::int64_t output_width() const override { return dims_.hidden_size; }

 protected:
  std::int64_t input_width() const override { return dims_.hidden_size; }

  Activations run_forward(const LayerParams& params, const LayerInput& input, ActivationCheckpointing,
                          SavedActivations& saved) const override {
    const std::int64_t rows = input.token_count(), width = dims_.hidden_size;
    Activations out = Activations::zeros(input.micro_batch, input.seq_len, width);
    std::vector<float> inv_rms(static_cast<std::size_t>(rows));
    rmsnorm_forward(input.hidden.data(), params.tensor("weight"), rows, width, dims_.rms_norm_eps,
                    out.values.data(), inv_rms.data());
    saved.put("inv_rms", std::move(inv_rms));
    return out;
  }

  Activations run_backward(const LayerParams& params, const SavedActivations& saved, const Activations& grad_output,
                           const LayerParams& grads) const override {
    const std::int64_t rows = grad_output.token_count(), width = dims_.hidden_size;
    Activations grad_input = Activations::zeros(saved.micro_batch, saved.seq_len, width);
    rmsnorm_backward(saved.input.data(), saved.get("inv_rms").data(), params.tensor("weight"),
                     grad_output.values.data(), rows, width, grad_input.values.data(), grads.tensor("weight"));
    return grad_input;
  }

 private:
  DecoderDims dims_;
};

}  // namespace

std::unique_ptr<LayerKernel> make_rmsnorm_layer(const DecoderDims& dims) {
  return std::make_unique<RMSNormLayer>(dims);
}

}  // namespace shardplan::runtime
