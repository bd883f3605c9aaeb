#pragma once
// Attention-output error of a compressed cache (CAOTE Fig. 3 and §1.11 of the digest): for the same query,
//   NMSE = ||o_compressed - o_full||^2 / ||o_full||^2,
// with o the attention output of all query heads concatenated ([n_heads * head_dim] per query).
#include <cstddef>

namespace kvscope::analysis {

// Over n values (all queries and heads of one layer and step); 0 when o_full is all zeros.
double output_nmse(const float* compressed, const float* full, std::size_t n);

}  // namespace kvscope::analysis
