#pragma once
// torch's CPU random generator replayed (as examples/policies/_torch_cpu_rng.py replays it in numpy), for the
// kvpress ports that draw from it: after torch.manual_seed(seed) the generator is MT19937 seeded by init_genrand
// (std::mt19937's own seeding); torch.randn of a tensor of at least 16 values takes 16 uniforms u at a time (the low
// 24 bits of one 32-bit output times 2^-24) and turns them into normals by Box-Muller, the first 8 as
// sqrt(-2 ln(1 - u[j])) cos(2 pi u[j+8]), the last 8 with sin.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvscope::policy {

// The first `count` normals (rounded up to a multiple of 16) that torch.randn calls draw after
// torch.manual_seed(seed), in float32 as torch returns them (within ~1e-6 of torch's own vectorised float32 math;
// bit-equal to the Python file's replay but for a rounding of the last float32 bit).
std::vector<float> torch_randn_stream(uint32_t seed, std::size_t count);

}  // namespace kvscope::policy
