// AdamW against values computed by hand from the update rule (Loshchilov & Hutter 2019; torch.optim.AdamW).
#include <doctest/doctest.h>

#include <vector>

#include "adamw.h"
#include "errors.h"

using namespace shardplan;
using namespace shardplan::runtime;

TEST_CASE("AdamW: two steps on three elements match the hand-computed values") {
  AdamWOptions options;
  options.learning_rate = 0.1;  // β₁ 0.9, β₂ 0.95, ε 1e-8, λ 0.1 (the defaults)
  std::vector<float> params = {1.0f, -2.0f, 0.5f};
  std::vector<float> m(3, 0.0f), v(3, 0.0f);

  // Step 1: m̂ = g and v̂ = g², so each element moves by lr·g/(|g| + ε) ≈ lr·sign(g) after the decay p·(1 − lr·λ)
  // = 0.99·p; a zero gradient only decays.
  adamw_step(params, std::vector<float>{0.5f, -0.25f, 0.0f}, m, v, 1, options);
  CHECK(params[0] == doctest::Approx(0.99 * 1.0 - 0.1));   // 0.89
  CHECK(params[1] == doctest::Approx(0.99 * -2.0 + 0.1));  // -1.88
  CHECK(params[2] == doctest::Approx(0.99 * 0.5));         // 0.495
  CHECK(m[0] == doctest::Approx(0.05));
  CHECK(v[0] == doctest::Approx(0.0125));

  // Step 2, bias corrections 1 − 0.9² = 0.19 and 1 − 0.95² = 0.0975:
  // e0: g 0.5 again: m = 0.095, v = 0.024375 → m̂ = 0.5, √v̂ = 0.5: p = 0.99·0.89 − 0.1 = 0.7811.
  // e1: g flips to 0.25: m = −0.0225 + 0.025 = 0.0025, v = 0.00609375 → m̂ = 0.0131579, √v̂ = 0.25:
  //     p = 0.99·(−1.88) − 0.1·0.0131579/0.25 = −1.8612 − 0.0052632 = −1.8664632.
  // e2: g 1 after 0: m = 0.1, v = 0.05 → m̂ = 0.5263158, √v̂ = 0.7161149: p = 0.49005 − 0.0734960 = 0.4165540.
  adamw_step(params, std::vector<float>{0.5f, 0.25f, 1.0f}, m, v, 2, options);
  CHECK(params[0] == doctest::Approx(0.7811).epsilon(1e-6));
  CHECK(params[1] == doctest::Approx(-1.8664632).epsilon(1e-6));
  CHECK(params[2] == doctest::Approx(0.4165540).epsilon(1e-6));
}

TEST_CASE("AdamW: a shard's step equals that slice of the unsharded step, bit for bit") {
  std::vector<float> params(11), grads(11);
  for (int i = 0; i < 11; ++i) {
    params[static_cast<std::size_t>(i)] = 0.1f * static_cast<float>(i - 5);
    grads[static_cast<std::size_t>(i)] = 0.03f * static_cast<float>((i * 7) % 5 - 2);
  }
  std::vector<float> whole = params, m(11, 0.0f), v(11, 0.0f);
  std::vector<float> shard(params.begin() + 4, params.begin() + 9), ms(5, 0.0f), vs(5, 0.0f);
  for (int step = 1; step <= 3; ++step) {
    adamw_step(whole, grads, m, v, step, {});
    adamw_step(shard, std::span<const float>(grads).subspan(4, 5), ms, vs, step, {});
  }
  for (std::size_t i = 0; i < 5; ++i) CHECK(shard[i] == whole[4 + i]);
}

TEST_CASE("AdamW refuses mismatched buffers and step 0") {
  std::vector<float> p(3), g(2), m(3), v(3);
  CHECK_THROWS_AS(adamw_step(p, g, m, v, 1, {}), InputError);
  g.resize(3);
  CHECK_THROWS_AS(adamw_step(p, g, m, v, 0, {}), InputError);
}
