// Linear layer forward and backward as Eigen GEMMs over row-major maps.
#include "linear.h"

#include "runtime_types.h"

namespace shardplan::runtime {

void linear_forward(const LinearShape& s, const float* x, const float* weight, const float* bias, float* y) {
  ConstMatrixView X(x, s.rows, s.in_features);
  ConstMatrixView W(weight, s.out_features, s.in_features);
  MatrixView Y(y, s.rows, s.out_features);
  Y.noalias() = X * W.transpose();
  if (bias != nullptr) Y.rowwise() += ConstVectorView(bias, s.out_features).transpose();
}

void linear_backward(const LinearShape& s, const float* x, const float* weight, const float* dy, float* dx,
                     bool accumulate_dx, float* grad_weight, float* grad_bias) {
  ConstMatrixView X(x, s.rows, s.in_features);
  ConstMatrixView W(weight, s.out_features, s.in_features);
  ConstMatrixView dY(dy, s.rows, s.out_features);
  MatrixView dW(grad_weight, s.out_features, s.in_features);
  dW.noalias() += dY.transpose() * X;
  if (grad_bias != nullptr) VectorView(grad_bias, s.out_features).noalias() += dY.colwise().sum().transpose();
  MatrixView dX(dx, s.rows, s.in_features);
  if (accumulate_dx) {
    dX.noalias() += dY * W;
  } else {
    dX.noalias() = dY * W;
  }
}

}  // namespace shardplan::runtime
