// Views (see views.hpp).
#include "views.hpp"

#include <string>

#include "loom/core/errors.hpp"

namespace loom::ops {

strided_dims apply_view(const view_chain& chain, const dims_t& base, std::int64_t mat_stride) {
  strided_dims v;
  v.rank = base.rank;
  for (int a = 0; a < base.rank; ++a) v.dims[a] = base.d[a];
  std::int64_t st = 1;
  for (int a = base.rank - 1; a >= 0; --a) {
    v.stride[a] = st;
    st *= base.d[a];
    if (a == base.rank - 2 && mat_stride) st = mat_stride;  // matrices spaced apart
  }
  for (const view_step& s : chain) {
    if (s.axis < 0 || s.axis >= v.rank) throw error("view: axis " + std::to_string(s.axis) + " out of range");
    switch (s.kind) {
      case view_step::slice:
        if (s.begin < 0 || s.begin + s.size > v.dims[s.axis]) throw error("view: slice past the axis");
        v.offset += s.begin * v.stride[s.axis];
        v.dims[s.axis] = s.size;
        break;
      case view_step::split: {
        if (v.rank == max_rank || s.size <= 0 || v.dims[s.axis] % s.size != 0) throw error("view: split does not fit");
        for (int a = v.rank; a > s.axis + 1; --a) {
          v.dims[a] = v.dims[a - 1];
          v.stride[a] = v.stride[a - 1];
        }
        ++v.rank;
        v.dims[s.axis + 1] = s.size;
        v.stride[s.axis + 1] = v.stride[s.axis];
        v.dims[s.axis] /= s.size;
        v.stride[s.axis] *= s.size;
        break;
      }
      case view_step::permute: {
        const strided_dims was = v;
        for (int a = 0; a < v.rank; ++a) {
          v.dims[a] = was.dims[s.perm[a]];
          v.stride[a] = was.stride[s.perm[a]];
        }
        break;
      }
    }
  }
  return v;
}

}  // namespace loom::ops
