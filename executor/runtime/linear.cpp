// Linear layer forward and backward as Eigen GEMMs over row-major maps.
#include "linear.h"

#include "aligned_products.h"

namespace shardplan::runtime {

void linear_forward(const LinearShape& s, const float* x, const float* weight, const float* bias, float* y) {
  ConstMatrixView X(x, s.rows, s.in_features);
  ConstMatrixView W(weight, s.out_features, s.in_features);
  MatrixView Y(y, s.rows, s.out_features);
  assign_product(Y, X * W.transpose());  // Note [Aligned products]
  if (bias != nullptr) Y.rowwise() += ConstVectorView(bias, s.out_features).transpose();
}

void linear_backward(const LinearShape& s, const float* x, const float* weight, const float* dy, float* dx,
                     bool accumulate_dx, float* grad_weight, float* grad_bias) {
  ConstMatrixView X(x, s.rows, s.in_features);
  ConstMatrixView W(weight, s.out_features, s.in_features);
  ConstMatrixView dY(dy, s.rows, s.out_features);
  if (grad_weight != nullptr) {
    MatrixView dW(grad_weight, s.out_features, s.in_features);
    add_product(dW, dY.transpose() * X);  // Note [Aligned products]: dW sits anywhere in a unit's flat gradient
  }
  if (grad_bias != nullptr) add_column_sums(grad_bias, dY);
  MatrixView dX(dx, s.rows, s.in_features);
  if (accumulate_dx) {
    add_product(dX, dY * W);
  } else {
    assign_product(dX, dY * W);
  }
}

}  // namespace shardplan::runtime
