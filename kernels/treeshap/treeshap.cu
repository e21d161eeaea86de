// GPU TreeSHAP kernels: path-dependent SHAP values, interactions and interventional SHAP over packed paths.
//
// Layout (built by kernels/treeshap/pack.py and gpu.py):
//  * "bins" are groups of <= 32 path elements; lane l of a warp holds element bin_ptr[bin] + l. Each path
//    (an "item") occupies a contiguous run of lanes [start, start + n): lane start is the root (feat = -1,
//    z = 1), the others hold the path's merged elements. All shuffles use the full mask; idle lanes carry dummies.
//  * "long" items (paths of more than 32 elements, root included) are handled one thread per (row, item) with
//    scratch memory in global memory.
//  * Output: phi[(row * (M + 1) + feature) * K + group] (SHAP) and
//    phi[((row * (M + 1) + i) * (M + 1) + j) * K + group] (interactions), accumulated by out_add (below); the
//    interaction kernels write the diagonal and the upper triangle (i < j), and mirror_upper fills the lower one.
//  * Reproducible sums: many warps add into one output, in an order the scheduler decides. With V.det set every
//    term arrives pre-scaled by a power of two (the host scales the leaf values, vval) and is rounded to a 64-bit
//    integer: integer addition is associative, so the sums are the same bytes whatever the order, and fixed_to_double
//    (mirror_upper for interactions) turns them back into doubles. The host picks the scale from a bound on every output, so the rounding error per
//    term (B 2^-59 for a bound B) stays far below that of a double sum of the same terms (B 2^-53 per addition).
// The DP (EXTEND / UNWOUNDSUM, digest sections 3.5-3.6) runs in double precision.

#define FULL_MASK 0xffffffffu

struct Elems {
  const int* feat;            // -1 = root lane
  const void* lo;             // XT: the lower bound (exclusive unless -inf)
  const void* hi;             // XT: the upper bound (inclusive)
  const unsigned char* flags; // bit 0 missing_ok, bit 1 cat_outside_ok
  const int* cptr;            // -1 = no categorical test
  const int* cnw;
  const unsigned int* cwords;
  const double* z;            // zero fraction
  const int* gstart;          // lane of the path's root within its bin
  const int* glen;            // path length in lanes (root included)
  const int* item;            // item index of the element
};

// Exact comparisons of X with the split bounds. CuPy compiles with -ftz=true, which flushes float32 subnormals to
// zero in FP32 compares: a bound of -1.4e-45 (the float32 below a split at 0.0, "x < 0 goes left") would compare
// equal to x = 0.0 and send zeros down the wrong side. float32 values are therefore compared as order-preserving
// integer keys (-0.0 folded onto +0.0, as IEEE compares them); doubles are unaffected by -ftz.
__device__ __forceinline__ int f32_key(float x) {
  int b = __float_as_int(x);
  if (b == (int)0x80000000) b = 0;
  return b < 0 ? (b ^ 0x7fffffff) : b;
}
template <typename XT> __device__ __forceinline__ bool below(XT a, XT b) { return a < b; }
template <> __device__ __forceinline__ bool below<float>(float a, float b) { return f32_key(a) < f32_key(b); }
template <typename XT> __device__ __forceinline__ bool not_above(XT a, XT b) { return a <= b; }
template <> __device__ __forceinline__ bool not_above<float>(float a, float b) { return f32_key(a) <= f32_key(b); }
template <typename XT> __device__ __forceinline__ bool non_negative(XT a) { return a >= (XT)0; }
template <> __device__ __forceinline__ bool non_negative<float>(float a) { return f32_key(a) >= 0; }

template <typename XT>
__device__ __forceinline__ bool satisfies(XT x, XT lo, XT hi, unsigned char flags, int cptr, int cnw,
                                          const unsigned int* cwords) {
  if (x != x) return (flags & 1) != 0;
  const XT ninf = (XT)__int_as_float(0xff800000);  // -inf (NVRTC has no INFINITY macro)
  if (!((lo == ninf || below<XT>(lo, x)) && not_above<XT>(x, hi))) return false;
  if (cptr >= 0) {
    if (non_negative<XT>(x) && x < (XT)(32.0 * (double)cnw)) {
      long long c = (long long)x;
      return ((cwords[cptr + (c >> 5)] >> (c & 31)) & 1u) != 0;
    }
    return (flags & 2) != 0;
  }
  return true;
}

template <typename XT>
__device__ __forceinline__ bool elem_sat(const Elems& E, long long e, XT x) {
  return satisfies<XT>(x, ((const XT*)E.lo)[e], ((const XT*)E.hi)[e], E.flags[e], E.cptr[e], E.cnw[e], E.cwords);
}

__device__ __forceinline__ void fill_inv(double* s_inv) {
  for (int k = threadIdx.x; k < 64; k += blockDim.x) s_inv[k] = 1.0 / (double)(k + 1);
  __syncthreads();
}

// Per-lane state of a packed path element, loaded once per warp.
template <typename XT>
struct Lane {
  long long e;
  bool active;
  int f, start, n, r, it;
  XT lo, hi;
  unsigned char flags;
  int cptr, cnw;
  double z, invz;
};

template <typename XT>
__device__ __forceinline__ Lane<XT> load_lane(const Elems& E, long long e0, long long e1, int lane) {
  Lane<XT> L;
  long long e = e0 + lane;
  L.e = e;
  L.active = e < e1;
  if (L.active) {
    L.f = E.feat[e];
    L.lo = ((const XT*)E.lo)[e];
    L.hi = ((const XT*)E.hi)[e];
    L.flags = E.flags[e];
    L.cptr = E.cptr[e];
    L.cnw = E.cnw[e];
    L.z = E.z[e];
    L.start = E.gstart[e];
    L.n = E.glen[e];
    L.it = E.item[e];
  } else {
    L.f = -1; L.lo = 0; L.hi = 0; L.flags = 0; L.cptr = -1; L.cnw = 0; L.z = 0.0;
    L.start = lane; L.n = 1; L.it = 0;
  }
  L.r = lane - L.start;
  L.invz = L.z > 0.0 ? 1.0 / L.z : 0.0;
  return L;
}

__device__ __forceinline__ int warp_max(int v) {
  for (int off = 16; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(FULL_MASK, v, off));
  return v;
}

template <typename XT>
__device__ __forceinline__ double one_fraction(const Lane<XT>& L, const XT* xrow, const unsigned int* cwords) {
  if (!L.active) return 0.0;
  if (L.f < 0) return 1.0;
  return satisfies<XT>(xrow[L.f], L.lo, L.hi, L.flags, L.cptr, L.cnw, cwords) ? 1.0 : 0.0;
}

// EXTEND over effective ranks 1..last of a group whose rank -> lane map is given by rank_lane; rank re of this lane.
// cond < 0: identity map. Otherwise ranks cond and n-1 are swapped and the extend stops before rank n-1.
__device__ __forceinline__ int rank_lane(int k, int start, int n, int cond) {
  if (cond < 0) return start + k;
  return start + (k == cond ? n - 1 : (k == n - 1 ? cond : k));
}

__device__ __forceinline__ double group_extend(double z, double o, int start, int n, int re, int last, int maxlast,
                                               int cond, int lane, const double* s_inv) {
  double w = (re == 0) ? 1.0 : 0.0;
  int lleft = (re >= 1) ? rank_lane(re - 1, start, n, cond) : lane;
  for (int k = 1; k <= maxlast; ++k) {
    bool kv = k <= last;
    int src = kv ? rank_lane(k, start, n, cond) : lane;
    double zk = __shfl_sync(FULL_MASK, z, src);
    double ok = __shfl_sync(FULL_MASK, o, src);
    double left = __shfl_sync(FULL_MASK, w, lleft);
    if (kv) {
      double a = (re < k) ? w * zk * (double)(k - re) * s_inv[k] : 0.0;
      double b = (re >= 1) ? ok * left * (double)re * s_inv[k] : 0.0;
      w = a + b;
    }
  }
  return w;
}

// UNWOUNDSUM for this lane's own element over a group extended up to rank d.
__device__ __forceinline__ double group_unwound(double w, double o, double z, double invz, int start, int n, int d,
                                                int maxd,
                                                int cond, int lane, const double* s_inv) {
  double nxt = __shfl_sync(FULL_MASK, w, d >= 0 ? rank_lane(d, start, n, cond) : lane);
  double total = 0.0;
  for (int j = 0; j < maxd; ++j) {
    int i = d - 1 - j;
    int src = (i >= 0) ? rank_lane(i, start, n, cond) : lane;
    double wi = __shfl_sync(FULL_MASK, w, src);
    if (i >= 0) {
      double tmp = nxt * (double)(d + 1) * s_inv[i];
      if (o != 0.0) {
        total += tmp;
        // pre = (d - i) z / (d + 1)
        nxt = wi - tmp * (double)(d - i) * z * s_inv[d];
      } else if (invz > 0.0) {
        total += wi * (double)(d + 1) * s_inv[d - i - 1] * invz;
      }
    }
  }
  return total;
}

// ------------------------------------------------------------------------------------------------------------------
// Warp kernels over bins
// ------------------------------------------------------------------------------------------------------------------

// The bin and row block of this warp (false when the block is past the last row), and the lane's element.
template <typename XT>
__device__ __forceinline__ bool warp_task(long long n_rows, const long long* bin_ptr, long long n_bins,
                                          int rpw, int bgroup,
                                          const Elems& E, int lane, long long& row0, long long& row1, Lane<XT>& L) {
  long long gw = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  // Row blocks ("banks") are taken in groups of bgroup: within a group, neighbouring warps take the same bin for
  // different banks, so warps running at once add into different rows' outputs (fewer atomics on one address), while
  // the outputs of one group stay within the L2 cache (the host sizes bgroup; 1 = bins first).
  long long n_banks = (n_rows + rpw - 1) / rpw;
  long long G = bgroup < n_banks ? (long long)bgroup : n_banks;
  long long rg = gw / (G * n_bins);
  long long first = rg * G;
  if (first >= n_banks) return false;
  long long Ge = min(G, n_banks - first);
  long long rem = gw - first * n_bins;
  long long bin = rem / Ge, bank = first + rem % Ge;
  if (bin >= n_bins) return false;   // the grid's last block runs past the last (bin, bank) of a partial group
  row0 = bank * rpw;
  if (row0 >= n_rows) return false;
  row1 = min(n_rows, row0 + (long long)rpw);
  L = load_lane<XT>(E, bin_ptr[bin], bin_ptr[bin + 1], lane);
  return true;
}

struct Vals {
  const int* vptr;     // item -> [vptr[it], vptr[it+1]) nonzero (group, value) pairs
  const int* vgroup;
  const double* vval;  // leaf values; with det, times the output's fixed-point scale
  int det;             // 1: fixed-point sums (reproducible), 0: double atomics (last bits depend on the order)
};

// Adds a term into an output (see "Reproducible sums" above).
__device__ __forceinline__ void out_add(double* p, double v, int det) {
  if (det) atomicAdd((unsigned long long*)p, (unsigned long long)__double2ll_rn(v));
  else atomicAdd(p, v);
}

template <typename XT>
__device__ __forceinline__ void shap_body(const XT* X, long long n_rows, int M, int K, const long long* bin_ptr,
                                          long long n_bins, int rpw, int bgroup, const Elems& E, const Vals& V,
double* phi,
                                          const double* s_inv) {
  int lane = threadIdx.x & 31;
  long long row0, row1;
  Lane<XT> L;
  if (!warp_task<XT>(n_rows, bin_ptr, n_bins, rpw, bgroup, E, lane, row0, row1, L)) return;
  int maxn = warp_max(L.n);
  int va = 0, vb = 0;
  if (L.active && L.r > 0) { va = V.vptr[L.it]; vb = V.vptr[L.it + 1]; }
  for (long long row = row0; row < row1; ++row) {
    const XT* xrow = X + row * M;
    double o = one_fraction<XT>(L, xrow, E.cwords);
    double w = group_extend(L.z, o, L.start, L.n, L.r, L.n - 1, maxn - 1, -1, lane, s_inv);
    double tot = group_unwound(w, o, L.z, L.invz, L.start, L.n, L.n - 1, maxn - 1, -1, lane, s_inv);
    if (va < vb) {
      double s = tot * (o - L.z);
      double* base = phi + (row * (M + 1) + L.f) * K;
      for (int q = va; q < vb; ++q) out_add(base + V.vgroup[q], s * V.vval[q], V.det);
    }
  }
}

// Variant for narrow outputs (M * K small): each warp sums its row's contributions in shared memory with shared
// atomics, then writes each touched output once (fewer global atomics when paths of a bin share features).
template <typename XT>
__device__ __forceinline__ void shap_smem_body(const XT* X, long long n_rows, int M, int K, const long long* bin_ptr,
                                               long long n_bins, int rpw, int bgroup, const Elems& E, const Vals& V,
                                               double* phi, const double* s_inv, double* s_acc) {
  int lane = threadIdx.x & 31;
  int MK = M * K;
  double* acc = s_acc + (threadIdx.x >> 5) * MK;
  for (int j = lane; j < MK; j += 32) acc[j] = 0.0;
  __syncwarp();
  long long row0, row1;
  Lane<XT> L;
  if (!warp_task<XT>(n_rows, bin_ptr, n_bins, rpw, bgroup, E, lane, row0, row1, L)) return;
  int maxn = warp_max(L.n);
  int va = 0, vb = 0;
  if (L.active && L.r > 0) { va = V.vptr[L.it]; vb = V.vptr[L.it + 1]; }
  for (long long row = row0; row < row1; ++row) {
    const XT* xrow = X + row * M;
    double o = one_fraction<XT>(L, xrow, E.cwords);
    double w = group_extend(L.z, o, L.start, L.n, L.r, L.n - 1, maxn - 1, -1, lane, s_inv);
    double tot = group_unwound(w, o, L.z, L.invz, L.start, L.n, L.n - 1, maxn - 1, -1, lane, s_inv);
    if (va < vb) {
      double s = tot * (o - L.z);
      for (int q = va; q < vb; ++q) out_add(acc + L.f * K + V.vgroup[q], s * V.vval[q], V.det);
    }
    __syncwarp();
    double* out = phi + row * (long long)(M + 1) * K;
    for (int j = lane; j < MK; j += 32) {
      unsigned long long bits = ((unsigned long long*)acc)[j];   // 0 bits: 0.0 or a zero fixed-point sum
      if (bits != 0ull) {
        if (V.det) atomicAdd((unsigned long long*)out + j, bits);
        else atomicAdd(out + j, acc[j]);
        acc[j] = 0.0;
      }
    }
    __syncwarp();
  }
}

// Table variant: for a path of d <= TABLE_DMAX elements, phi of element k depends only on which of the
// d elements the row satisfies; table[etoff[e] + pattern * d] holds (o_k - z_k) * UNWOUNDSUM_k for each pattern, so a
// row costs one comparison, one ballot and one load per lane instead of the O(d^2) DP.
#define TABLE_DMAX 12

template <typename XT>
__device__ __forceinline__ void shap_table_body(const XT* X, long long n_rows, int M, int K,
                                                const long long* bin_ptr, long long n_bins, int rpw, int bgroup,
                                                const Elems& E, const Vals& V, const long long* etoff,
                                                const double* table, double* phi) {
  int lane = threadIdx.x & 31;
  long long row0, row1;
  Lane<XT> L;
  if (!warp_task<XT>(n_rows, bin_ptr, n_bins, rpw, bgroup, E, lane, row0, row1, L)) return;
  bool el = L.active && L.r > 0;
  int d = L.n - 1;
  unsigned int dmask = el ? ((1u << d) - 1u) : 0u;
  long long toff = el ? etoff[L.e] : 0;
  int va = 0, vb = 0;
  if (el) { va = V.vptr[L.it]; vb = V.vptr[L.it + 1]; }
  for (long long row = row0; row < row1; ++row) {
    bool sat = el && satisfies<XT>(X[row * M + (el ? L.f : 0)], L.lo, L.hi, L.flags, L.cptr, L.cnw, E.cwords);
    unsigned int m = __ballot_sync(FULL_MASK, sat);
    if (va < vb) {
      unsigned int pat = (m >> (L.start + 1)) & dmask;
      double s = table[toff + (long long)pat * d];
      double* base = phi + (row * (M + 1) + L.f) * K;
      for (int q = va; q < vb; ++q) out_add(base + V.vgroup[q], s * V.vval[q], V.det);
    }
  }
}

// Block sums (SHAP values, wide outputs). The packing keeps each tree's paths in neighbouring bins, and a block of
// W warps takes W consecutive bins (a "group") and a bank of rows. Every path of a tree holds its root's feature (and
// many share the features below it), so the group's lanes map onto few distinct outputs (feature, output group): its
// "slots". A lane adds its term into its slot for the row in shared memory; each chunk of R rows is then flushed with
// one global add per nonzero slot, instead of one global add per term. Integer (fixed-point) adds stay exact in any
// order, so the output is the same bytes as the direct kernels'. Needs one leaf value per path.
struct Slots {
  const int* eslot;        // packed element -> its slot within its group (root lanes: 0, never added)
  const long long* gslot;  // group -> its first slot; gslot[g + 1] - gslot[g] slots
  const int* soff;         // slot -> output offset feature * K + output group
};

__device__ __forceinline__ void slot_add(unsigned long long* a, double v, int det) {
  if (det) atomicAdd(a, (unsigned long long)__double2ll_rn(v));
  else atomicAdd((double*)a, v);
}

// A block's task: its rows, its group's S slots (their output offsets soff) and, per lane, the element's slot and
// leaf value (has: the lane adds terms).
struct BlockTask {
  long long row0, row1;
  int S;
  const int* soff;
  int slot;
  bool has;
  double val;
};

// The group and row bank of this block (false past the last row: the same for the whole block) and the lane's
// element (inactive past the group's last bin); zeroes the block's accumulator of R rows x S slots.
template <typename XT>
__device__ __forceinline__ bool group_task(long long n_rows, const long long* bin_ptr, long long n_bins, int rpw,
                                           int R, const Elems& E, const Vals& V, const Slots& Sl, int lane,
                                           BlockTask& T, Lane<XT>& L, unsigned long long* acc) {
  int W = blockDim.x >> 5;
  long long n_groups = (n_bins + W - 1) / W;
  long long g = blockIdx.x % n_groups;
  T.row0 = (long long)(blockIdx.x / n_groups) * rpw;
  if (T.row0 >= n_rows) return false;
  T.row1 = min(n_rows, T.row0 + (long long)rpw);
  long long bin = g * W + (threadIdx.x >> 5);
  long long e0 = bin < n_bins ? bin_ptr[bin] : 0, e1 = bin < n_bins ? bin_ptr[bin + 1] : 0;
  L = load_lane<XT>(E, e0, e1, lane);
  T.S = (int)(Sl.gslot[g + 1] - Sl.gslot[g]);
  T.soff = Sl.soff + Sl.gslot[g];
  bool el = L.active && L.r > 0;
  T.has = el && V.vptr[L.it] < V.vptr[L.it + 1];
  T.val = T.has ? V.vval[V.vptr[L.it]] : 0.0;
  T.slot = el ? Sl.eslot[L.e] : 0;
  for (int i = threadIdx.x; i < R * T.S; i += blockDim.x) acc[i] = 0ull;
  __syncthreads();
  return true;
}

// One global add per nonzero slot of the chunk's nr rows (from row0), then the accumulator is zero again.
__device__ __forceinline__ void flush_slots(unsigned long long* acc, int nr, int S, long long row0, long long stride,
                                            const int* soff, double* phi, int det) {
  __syncthreads();
  for (int i = threadIdx.x; i < nr * S; i += blockDim.x) {
    unsigned long long bits = acc[i];
    if (bits != 0ull) {
      int r = i / S;
      double* p = phi + (row0 + r) * stride + soff[i - r * S];
      if (det) atomicAdd((unsigned long long*)p, bits);
      else atomicAdd(p, __longlong_as_double((long long)bits));
      acc[i] = 0ull;
    }
  }
  __syncthreads();
}

// Table kernel with block sums (see shap_table_body for the table).
template <typename XT>
__device__ __forceinline__ void shap_table_block_body(const XT* X, long long n_rows, int M, int K,
                                                      const long long* bin_ptr, long long n_bins, int rpw, int R,
                                                      const Elems& E, const Vals& V, const Slots& Sl,
                                                      const long long* etoff, const double* table, double* phi,
                                                      unsigned long long* acc) {
  BlockTask T;
  Lane<XT> L;
  if (!group_task<XT>(n_rows, bin_ptr, n_bins, rpw, R, E, V, Sl, threadIdx.x & 31, T, L, acc)) return;
  bool el = L.active && L.r > 0;
  int d = L.n - 1;
  unsigned int dmask = el ? ((1u << d) - 1u) : 0u;
  long long toff = el ? etoff[L.e] : 0;
  for (long long rb = T.row0; rb < T.row1; rb += R) {
    int nr = (int)min((long long)R, T.row1 - rb);
    for (int r = 0; r < nr; ++r) {
      long long row = rb + r;
      bool sat = el && satisfies<XT>(X[row * M + (el ? L.f : 0)], L.lo, L.hi, L.flags, L.cptr, L.cnw, E.cwords);
      unsigned int m = __ballot_sync(FULL_MASK, sat);
      if (T.has) {
        unsigned int pat = (m >> (L.start + 1)) & dmask;
        slot_add(acc + r * T.S + T.slot, table[toff + (long long)pat * d] * T.val, V.det);
      }
    }
    flush_slots(acc, nr, T.S, rb, (long long)(M + 1) * K, T.soff, phi, V.det);
  }
}

// DP kernel with block sums (see shap_body).
template <typename XT>
__device__ __forceinline__ void shap_block_body(const XT* X, long long n_rows, int M, int K, const long long* bin_ptr,
                                                long long n_bins, int rpw, int R, const Elems& E, const Vals& V,
                                                const Slots& Sl, double* phi, const double* s_inv,
                                                unsigned long long* acc) {
  int lane = threadIdx.x & 31;
  BlockTask T;
  Lane<XT> L;
  if (!group_task<XT>(n_rows, bin_ptr, n_bins, rpw, R, E, V, Sl, lane, T, L, acc)) return;
  int maxn = warp_max(L.n);
  for (long long rb = T.row0; rb < T.row1; rb += R) {
    int nr = (int)min((long long)R, T.row1 - rb);
    for (int r = 0; r < nr; ++r) {
      const XT* xrow = X + (rb + r) * M;
      double o = one_fraction<XT>(L, xrow, E.cwords);
      double w = group_extend(L.z, o, L.start, L.n, L.r, L.n - 1, maxn - 1, -1, lane, s_inv);
      double tot = group_unwound(w, o, L.z, L.invz, L.start, L.n, L.n - 1, maxn - 1, -1, lane, s_inv);
      if (T.has) slot_add(acc + r * T.S + T.slot, tot * (o - L.z) * T.val, V.det);
    }
    flush_slots(acc, nr, T.S, rb, (long long)(M + 1) * K, T.soff, phi, V.det);
  }
}

// Interaction-table variant: for a path of d <= TABLE_DMAX elements the interaction matrix of its elements
// depends only on the pattern of satisfied elements, and it is symmetric, so a table holds its d(d+1)/2 distinct
// entries per pattern, laid out [pattern][t][r] for lane r = 0..d-1 and step t = 0..d/2: step 0 is the diagonal of
// element r, step t >= 1 the pair (r, (r + t) mod d) (pair_slot picks one slot per unordered pair). A row costs one
// comparison, one ballot and at most d/2 + 1 loads per lane. Off-diagonal entries go to the upper triangle of phi
// (feature i < j); mirror_upper copies them to the lower one.
#define ITABLE_TMAX (TABLE_DMAX / 2 + 1)

__device__ __forceinline__ bool pair_slot(int r, int t, int d) { return t == 0 || 2 * t < d || (2 * t == d && r < t); }

template <typename XT>
__device__ __forceinline__ void inter_table_body(const XT* X, long long n_rows, int M, int K,
                                                 const long long* bin_ptr, long long n_bins, int rpw, int bgroup,
                                                 const Elems& E, const Vals& V, const long long* etoff,
                                                 const double* table, double* phi) {
  int lane = threadIdx.x & 31;
  long long row0, row1;
  Lane<XT> L;
  if (!warp_task<XT>(n_rows, bin_ptr, n_bins, rpw, bgroup, E, lane, row0, row1, L)) return;
  bool el = L.active && L.r > 0;
  int d = el ? L.n - 1 : 1;
  int r = el ? L.r - 1 : 0;
  int T = d / 2 + 1;
  unsigned int dmask = el ? ((1u << d) - 1u) : 0u;
  long long toff = el ? etoff[L.e] : 0;
  long long M1 = M + 1;
  int cell[ITABLE_TMAX];
#pragma unroll
  for (int t = 0; t < ITABLE_TMAX; ++t) {
    int src = el ? L.start + 1 + (r + t) % d : lane;
    int pf = __shfl_sync(FULL_MASK, L.f, src);
    bool ok = el && t < T && pair_slot(r, t, d);
    cell[t] = ok ? (int)(min(L.f, pf) * M1 + max(L.f, pf)) : -1;
  }
  int va = 0, vb = 0;
  if (el) { va = V.vptr[L.it]; vb = V.vptr[L.it + 1]; }
  for (long long row = row0; row < row1; ++row) {
    bool sat = el && satisfies<XT>(X[row * M + (el ? L.f : 0)], L.lo, L.hi, L.flags, L.cptr, L.cnw, E.cwords);
    unsigned int m = __ballot_sync(FULL_MASK, sat);
    if (va < vb) {
      unsigned int pat = (m >> (L.start + 1)) & dmask;
      const double* tp = table + toff + (long long)pat * (T * d);
      double s[ITABLE_TMAX];
#pragma unroll
      for (int t = 0; t < ITABLE_TMAX; ++t) s[t] = cell[t] >= 0 ? __ldg(tp + t * d) : 0.0;
      double* prow = phi + row * M1 * M1 * K;
#pragma unroll
      for (int t = 0; t < ITABLE_TMAX; ++t) {
        if (s[t] == 0.0) continue;
        double* base = prow + (long long)cell[t] * K;
        for (int q = va; q < vb; ++q) out_add(base + V.vgroup[q], s[t] * V.vval[q], V.det);
      }
    }
  }
}

// Interaction table kernel with block sums (see "Block sums" and inter_table_body). A group's slots are the distinct
// outputs (min(f, pf), max(f, pf), output group) of its lanes' table cells: the diagonal and upper-triangle entries
// of the features its paths share, far fewer than its terms. Sl.eslot holds ITABLE_TMAX slots per packed element
// (-1: no cell at that step, as pair_slot decides); group_task's T.slot (eslot[e]) goes unused here. Each term is the
// direct kernel's (table entry times the fixed-point leaf value, rounded once), so fixed-point sums are its bytes.
// Shared memory has native 32-bit atomic adds only (a 64-bit add is a compare-and-swap loop, retried on every
// conflict, and the lanes of a bin's paths share their root's cells), so a fixed-point term is added as two 32-bit
// words: the low word's atomic returns the old word, whose overflow carries into the high word's add. Each low add
// is atomic and its carry exact, and the high adds commute, so after all adds the slot holds the 64-bit sum modulo
// 2^64, as one 64-bit atomic per term would. Rows are taken two at a time: the second row's input and table loads are
// in flight with the first's.
__device__ __forceinline__ void slot_add_fixed(unsigned long long* a, long long v) {
  unsigned int* w = (unsigned int*)a;         // little-endian: w[0] the low word, w[1] the high word
  unsigned int lo = (unsigned int)v, hi = (unsigned int)((unsigned long long)v >> 32);
  unsigned int old = atomicAdd(w, lo);
  hi += (old + lo < old) ? 1u : 0u;
  if (hi != 0u) atomicAdd(w + 1, hi);
}

__device__ __forceinline__ void inter_slot_add(unsigned long long* a, double v, int det) {
  if (det) slot_add_fixed(a, __double2ll_rn(v));
  else atomicAdd((double*)a, v);
}

template <typename XT>
__device__ __forceinline__ void inter_table_block_body(const XT* X, long long n_rows, int M, int K,
                                                       const long long* bin_ptr, long long n_bins, int rpw, int R,
                                                       const Elems& E, const Vals& V, const Slots& Sl,
                                                       const long long* etoff, const double* table, double* phi,
                                                       unsigned long long* acc) {
  BlockTask T;
  Lane<XT> L;
  if (!group_task<XT>(n_rows, bin_ptr, n_bins, rpw, R, E, V, Sl, threadIdx.x & 31, T, L, acc)) return;
  bool el = L.active && L.r > 0;
  int d = el ? L.n - 1 : 1;
  int nT = d / 2 + 1;
  unsigned int dmask = el ? ((1u << d) - 1u) : 0u;
  long long toff = el ? etoff[L.e] : 0;
  int slot[ITABLE_TMAX];
#pragma unroll
  for (int t = 0; t < ITABLE_TMAX; ++t) slot[t] = (T.has && t < nT) ? Sl.eslot[L.e * ITABLE_TMAX + t] : -1;
  int f = el ? L.f : 0;
  long long M1 = M + 1;
  for (long long rb = T.row0; rb < T.row1; rb += R) {
    int nr = (int)min((long long)R, T.row1 - rb);
    for (int r = 0; r < nr; r += 2) {
      bool two = r + 1 < nr;
      const XT* x0 = X + (rb + r) * M + f;
      XT a = *x0, b = two ? x0[M] : (XT)0;
      bool sa = el && satisfies<XT>(a, L.lo, L.hi, L.flags, L.cptr, L.cnw, E.cwords);
      bool sb = el && two && satisfies<XT>(b, L.lo, L.hi, L.flags, L.cptr, L.cnw, E.cwords);
      unsigned int ma = __ballot_sync(FULL_MASK, sa), mb = __ballot_sync(FULL_MASK, sb);
      if (T.has) {
        const double* ta = table + toff + (long long)((ma >> (L.start + 1)) & dmask) * (nT * d);
        const double* tb = table + toff + (long long)((mb >> (L.start + 1)) & dmask) * (nT * d);
        double va[ITABLE_TMAX], vb[ITABLE_TMAX];
#pragma unroll
        for (int t = 0; t < ITABLE_TMAX; ++t) {
          va[t] = slot[t] >= 0 ? __ldg(ta + t * d) : 0.0;
          vb[t] = (slot[t] >= 0 && two) ? __ldg(tb + t * d) : 0.0;
        }
        unsigned long long* aa = acc + r * T.S;
#pragma unroll
        for (int t = 0; t < ITABLE_TMAX; ++t) {
          if (va[t] != 0.0) inter_slot_add(aa + slot[t], va[t] * T.val, V.det);
          if (vb[t] != 0.0) inter_slot_add(aa + T.S + slot[t], vb[t] * T.val, V.det);
        }
      }
    }
    flush_slots(acc, nr, T.S, rb, M1 * M1 * K, T.soff, phi, V.det);
  }
}

template <typename XT>
__device__ __forceinline__ void interactions_body(const XT* X, long long n_rows, int M, int K,
                                                  const long long* bin_ptr, long long n_bins, int rpw, int bgroup,
                                                  const Elems& E, const Vals& V, double* phi, const double* s_inv) {
  int lane = threadIdx.x & 31;
  long long row0, row1;
  Lane<XT> L;
  if (!warp_task<XT>(n_rows, bin_ptr, n_bins, rpw, bgroup, E, lane, row0, row1, L)) return;
  int maxn = warp_max(L.n);
  int va = 0, vb = 0;
  if (L.active && L.r > 0) { va = V.vptr[L.it]; vb = V.vptr[L.it + 1]; }
  long long M1 = M + 1;
  for (long long row = row0; row < row1; ++row) {
    const XT* xrow = X + row * M;
    double o = one_fraction<XT>(L, xrow, E.cwords);
    double w = group_extend(L.z, o, L.start, L.n, L.r, L.n - 1, maxn - 1, -1, lane, s_inv);
    double tot = group_unwound(w, o, L.z, L.invz, L.start, L.n, L.n - 1, maxn - 1, -1, lane, s_inv);
    double diag = tot * (o - L.z);
    for (int c = 1; c < maxn; ++c) {
      bool cv = c < L.n;
      int src = cv ? L.start + c : lane;
      double oj = __shfl_sync(FULL_MASK, o, src);
      double zj = __shfl_sync(FULL_MASK, L.z, src);
      int fj = __shfl_sync(FULL_MASK, L.f, src);
      int re = !cv ? L.r : (L.r == c ? L.n - 1 : (L.r == L.n - 1 ? c : L.r));
      int cond = cv ? c : -1;
      int last = cv ? L.n - 2 : 0;
      double w2 = group_extend(L.z, o, L.start, L.n, re, last, maxn - 2, cond, lane, s_inv);
      double t2 = group_unwound(w2, o, L.z, L.invz, L.start, L.n, last, maxn - 2, cond, lane, s_inv);
      if (cv && va < vb && re >= 1 && re <= L.n - 2) {
        double x = t2 * (o - L.z) * (oj - zj) * 0.5;
        diag -= x;
        if (L.f < fj) {   // upper triangle only: the lane of fj computes the same value; mirror_upper copies it
          double* base = phi + ((row * M1 + L.f) * M1 + fj) * K;
          for (int q = va; q < vb; ++q) out_add(base + V.vgroup[q], x * V.vval[q], V.det);
        }
      }
    }
    if (va < vb) {
      double* base = phi + ((row * M1 + L.f) * M1 + L.f) * K;
      for (int q = va; q < vb; ++q) out_add(base + V.vgroup[q], diag * V.vval[q], V.det);
    }
  }
}

// Interactions by quadrature, the per-row kernel for paths without tables. For a path with zero fractions
// z_e and one fractions o_e (this row), g_e(t) = z_e + t (o_e - z_e), and the Shapley (interaction) weights are Beta
// integrals, so
//   phi_i  = (o_i - z_i) * int_0^1 prod_{e != i} g_e(t) dt,
//   phi_ij = (o_i - z_i) (o_j - z_j) / 2 * int_0^1 prod_{e != i, j} g_e(t) dt   (i != j),
//   phi_ii = phi_i - sum_{j != i} phi_ij.
// The integrands are polynomials of degree <= d - 1, so Gauss-Legendre with Q = ceil(d / 2) nodes on [0, 1] is exact
// (d: the most elements of a path in the bin). Per node, the path's product P comes from a segmented product scan
// over its lanes; lane i keeps a_q = w_q P_q / g_i(t_q) and h_q = 1 / g_i(t_q), and the pair (i, j) costs Q shuffles
// and FMAs: sum_q a_q h_q(j). Lane r (0-based among the path's elements) takes the pairs (r, (r + t) mod d) that
// pair_slot gives it, and hands each value to its partner for the partner's diagonal. An element with z = o = 0
// zeroes the path's every term (the path's value is 0 with the feature absent or present), so the row skips the path.
// s_gl: for Q = 1..QM, the Q nodes then the Q weights at offset Q (Q - 1).
// One row of a quadrature kernel: this lane's g(t_q) = z + t_q (o - z), then p[q] = w_q prod_{e != lane} g_e(t_q)
// over its path (segmented product scan, steps = ceil(log2(most lanes of a path))), h[q] = 1 / g(t_q); returns the
// number of the path's elements with z = o = 0 (their factor is 1 here; any such element zeroes the path).
template <int QM>
__device__ __forceinline__ int quad_products(double z, double o, int r, int last, int Q, int steps, const double* xq,
                                             const double* wq, double* p, double* h) {
  bool zero = z == 0.0 && o == 0.0;
  double dz = o - z;
#pragma unroll
  for (int q = 0; q < QM; ++q) {
    if (q < Q) {
      double gq = zero ? 1.0 : fma(xq[q], dz, z);
      p[q] = gq;
      h[q] = 1.0 / gq;
    }
  }
  int nz = zero ? 1 : 0;
  for (int s = 0; s < steps; ++s) {
    int off = 1 << s;
#pragma unroll
    for (int q = 0; q < QM; ++q) {
      if (q < Q) {
        double v = __shfl_up_sync(FULL_MASK, p[q], off);
        if (r >= off) p[q] *= v;
      }
    }
    int v = __shfl_up_sync(FULL_MASK, nz, off);
    if (r >= off) nz += v;
  }
#pragma unroll
  for (int q = 0; q < QM; ++q)
    if (q < Q) p[q] = __shfl_sync(FULL_MASK, p[q], last) * wq[q] * h[q];
  return __shfl_sync(FULL_MASK, nz, last);
}

// Warp-uniform quadrature set-up of a bin: Q = ceil(dw / 2) nodes for paths of up to dw = maxn - 1 elements (exact
// for phi_i's degree dw - 1), the rule's nodes and weights in s_gl, and the scan's steps.
__device__ __forceinline__ void quad_rule(int maxn, const double* s_gl, int& Q, const double*& xq, const double*& wq,
                                          int& steps) {
  Q = max(1, maxn / 2);
  xq = s_gl + Q * (Q - 1);
  wq = xq + Q;
  steps = 0;
  while ((1 << steps) < maxn) ++steps;
}

// SHAP values by quadrature (the per-row kernel for paths without tables): phi_i = (o_i - z_i) sum_q p[q].
template <typename XT, int QM>
__device__ __forceinline__ void shap_quad_body(const XT* X, long long n_rows, int M, int K, const long long* bin_ptr,
                                               long long n_bins, int rpw, int bgroup, const Elems& E, const Vals& V,
                                               double* phi, const double* s_gl) {
  int lane = threadIdx.x & 31;
  long long row0, row1;
  Lane<XT> L;
  if (!warp_task<XT>(n_rows, bin_ptr, n_bins, rpw, bgroup, E, lane, row0, row1, L)) return;
  int Q, steps;
  const double *xq, *wq;
  quad_rule(warp_max(L.n), s_gl, Q, xq, wq, steps);
  int va = 0, vb = 0;
  if (L.active && L.r > 0) { va = V.vptr[L.it]; vb = V.vptr[L.it + 1]; }
  int last = L.start + L.n - 1;
  for (long long row = row0; row < row1; ++row) {
    double o = one_fraction<XT>(L, X + row * M, E.cwords);
    double p[QM], h[QM];
    int nz = quad_products<QM>(L.z, o, L.r, last, Q, steps, xq, wq, p, h);
    if (va < vb && nz == 0) {
      double s = 0.0;
#pragma unroll
      for (int q = 0; q < QM; ++q)
        if (q < Q) s += p[q];
      s *= o - L.z;
      double* base = phi + (row * (M + 1) + L.f) * K;
      if (s != 0.0)
        for (int q = va; q < vb; ++q) out_add(base + V.vgroup[q], s * V.vval[q], V.det);
    }
  }
}

template <typename XT, int QM>
__device__ __forceinline__ void inter_quad_body(const XT* X, long long n_rows, int M, int K,
                                                const long long* bin_ptr, long long n_bins, int rpw, int bgroup,
                                                const Elems& E, const Vals& V, double* phi, const double* s_gl) {
  int lane = threadIdx.x & 31;
  long long row0, row1;
  Lane<XT> L;
  if (!warp_task<XT>(n_rows, bin_ptr, n_bins, rpw, bgroup, E, lane, row0, row1, L)) return;
  bool el = L.active && L.r > 0;
  int maxn = warp_max(L.n);
  int Q, steps;
  const double *xq, *wq;
  quad_rule(maxn, s_gl, Q, xq, wq, steps);
  int d = el ? L.n - 1 : 1;
  int r = el ? L.r - 1 : 0;
  int tmax = (maxn - 1) / 2;
  int va = 0, vb = 0;
  if (el) { va = V.vptr[L.it]; vb = V.vptr[L.it + 1]; }
  long long M1 = M + 1;
  int last = L.start + L.n - 1;
  for (long long row = row0; row < row1; ++row) {
    double o = one_fraction<XT>(L, X + row * M, E.cwords);
    double dz = o - L.z;
    double p[QM], h[QM];
    int nz = quad_products<QM>(L.z, o, L.r, last, Q, steps, xq, wq, p, h);
    double phi_i = 0.0;
#pragma unroll
    for (int q = 0; q < QM; ++q)
      if (q < Q) phi_i += p[q];
    bool live = el && nz == 0 && va < vb;
    double diag = phi_i * dz;
    double* prow = phi + row * M1 * M1 * K;
    for (int t = 1; t <= tmax; ++t) {
      int src = el ? L.start + 1 + (r + t) % d : lane;
      double s = 0.0;
#pragma unroll
      for (int q = 0; q < QM; ++q)
        if (q < Q) s = fma(p[q], __shfl_sync(FULL_MASK, h[q], src), s);
      double dzj = __shfl_sync(FULL_MASK, dz, src);
      int fj = __shfl_sync(FULL_MASK, L.f, src);
      bool mine = el && 2 * t <= d && pair_slot(r, t, d);
      double x = mine ? 0.5 * s * dz * dzj : 0.0;
      double xb = __shfl_sync(FULL_MASK, x, el ? L.start + 1 + (r - t % d + d) % d : lane);
      diag -= x + xb;
      if (live && mine && x != 0.0) {
        double* base = prow + (long long)(min(L.f, fj) * M1 + max(L.f, fj)) * K;
        for (int q = va; q < vb; ++q) out_add(base + V.vgroup[q], x * V.vval[q], V.det);
      }
    }
    if (live && diag != 0.0) {
      double* base = prow + (L.f * M1 + L.f) * K;
      for (int q = va; q < vb; ++q) out_add(base + V.vgroup[q], diag * V.vval[q], V.det);
    }
  }
}

// Interventional SHAP (digest 3.8 "Interventional"): per (x, r) pair, elements satisfied only by x get
// +W(s-1, n), elements satisfied only by r get -W(s, n); a path with an element satisfied by neither gives 0.
// scale (optional, (n_rows, n_bg, K)) rescales each pair for a non-linear output transform.
template <typename XT>
__device__ __forceinline__ void interventional_body(const XT* X, long long n_rows, const XT* R, long long n_bg,
                                                    int M, int K, const long long* bin_ptr, long long n_bins,
                                                    int rpw, int bgroup, const Elems& E, const Vals& V,
const double* scale,
                                                    const double* Wt, int wstride, double* phi) {
  int lane = threadIdx.x & 31;
  long long row0, row1;
  Lane<XT> L;
  if (!warp_task<XT>(n_rows, bin_ptr, n_bins, rpw, bgroup, E, lane, row0, row1, L)) return;
  bool el = L.active && L.f >= 0;
  unsigned int gmask = (unsigned int)((((1ull << (L.n - 1)) - 1ull) << (L.start + 1)) & 0xffffffffull);
  int va = 0, vb = 0;
  if (el) { va = V.vptr[L.it]; vb = V.vptr[L.it + 1]; }
  int nloops = scale ? warp_max(vb - va) : 1;
  double inv_bg = 1.0 / (double)n_bg;
  for (long long row = row0; row < row1; ++row) {
    bool a = el && satisfies<XT>(X[row * M + (el ? L.f : 0)], L.lo, L.hi, L.flags, L.cptr, L.cnw, E.cwords);
    for (int qq = 0; qq < nloops; ++qq) {
      int q = va + qq;
      bool qv = q < vb;
      int g = (scale && qv) ? V.vgroup[q] : 0;
      double acc = 0.0;
      for (long long rr = 0; rr < n_bg; ++rr) {
        bool b = el && satisfies<XT>(R[rr * M + (el ? L.f : 0)], L.lo, L.hi, L.flags, L.cptr, L.cnw, E.cwords);
        unsigned int ma = __ballot_sync(FULL_MASK, a);
        unsigned int mb = __ballot_sync(FULL_MASK, b);
        unsigned int nx = __ballot_sync(FULL_MASK, el && !a && !b);
        if (el && (a != b) && !(nx & gmask)) {
          int s = __popc(ma & ~mb & gmask);
          int nn = __popc((ma ^ mb) & gmask);
          double c = a ? Wt[(s - 1) * wstride + nn] : -Wt[s * wstride + nn];
          if (scale) c *= scale[(row * n_bg + rr) * K + g];
          acc += c;
        }
      }
      if (scale) {
        if (qv) out_add(phi + (row * (M + 1) + L.f) * K + g, acc * inv_bg * V.vval[q], V.det);
      } else {
        for (int q2 = va; q2 < vb; ++q2)
          out_add(phi + (row * (M + 1) + L.f) * K + V.vgroup[q2], acc * inv_bg * V.vval[q2], V.det);
      }
    }
  }
}

// ------------------------------------------------------------------------------------------------------------------
// One thread per (row, item): predictions and the long-path fallbacks
// ------------------------------------------------------------------------------------------------------------------

// out[row, g] += v for every item whose elements are all satisfied by row. istart points at the first non-root
// element, ilen counts non-root elements.
template <typename XT>
__device__ __forceinline__ void predict_body(const XT* X, long long n_rows, int M, int K, const long long* istart,
                                             const int* ilen, long long n_items, const Elems& E, const Vals& V,
                                             double* out) {
  long long nthreads = (long long)gridDim.x * blockDim.x;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < n_rows * n_items; t += nthreads) {
    long long row = t / n_items, it = t - row * n_items;
    const XT* xrow = X + row * M;
    long long e0 = istart[it];
    int n = ilen[it];
    bool ok = true;
    for (int k = 0; k < n && ok; ++k) ok = elem_sat<XT>(E, e0 + k, xrow[E.feat[e0 + k]]);
    if (ok)
      for (int q = V.vptr[it]; q < V.vptr[it + 1]; ++q) out_add(out + row * K + V.vgroup[q], V.vval[q], V.det);
  }
}

__device__ __forceinline__ int skip_idx(int k, int skip) { return (skip >= 0 && k >= skip) ? k + 1 : k; }

// Serial EXTEND over m ranks (rank k -> element skip_idx(k, skip)).
__device__ void serial_extend(double* w, const double* z, const double* o, int m, int skip) {
  w[0] = 1.0;
  for (int r = 1; r < m; ++r) w[r] = 0.0;
  for (int k = 1; k < m; ++k) {
    int ek = skip_idx(k, skip);
    double zk = z[ek], ok = o[ek], inv = 1.0 / (double)(k + 1);
    for (int r = k; r >= 0; --r) {
      double a = (r < k) ? w[r] * zk * (double)(k - r) * inv : 0.0;
      double b = (r >= 1) ? ok * w[r - 1] * (double)r * inv : 0.0;
      w[r] = a + b;
    }
  }
}

__device__ double serial_unwound(const double* w, double z, double o, int m) {
  int d = m - 1;
  double nxt = w[d], total = 0.0;
  for (int i = d - 1; i >= 0; --i) {
    double tmp = nxt * (double)(d + 1) / (double)(i + 1);
    if (o != 0.0) {
      total += tmp;
      nxt = w[i] - tmp * (double)(d - i) * z / (double)(d + 1);
    } else if (z > 0.0) {
      total += w[i] * (double)(d + 1) / ((double)(d - i) * z);
    }
  }
  return total;
}

// Long paths: items [lstart, lstart + llen) include the root element first. scratch: 3 * lmax doubles per thread.
template <typename XT>
__device__ __forceinline__ void long_body(const XT* X, long long n_rows, int M, int K, const long long* lstart,
                                          const int* llen, const int* litem, long long n_long, const Elems& E,
                                          const Vals& V, double* phi, double* scratch, int lmax, int interactions) {
  long long nthreads = (long long)gridDim.x * blockDim.x;
  long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  double* w = scratch + tid * 3 * (long long)lmax;
  double* o = w + lmax;
  double* w2 = o + lmax;
  long long M1 = M + 1;
  for (long long t = tid; t < n_rows * n_long; t += nthreads) {
    long long row = t / n_long, li = t - row * n_long;
    long long e0 = lstart[li];
    int n = llen[li], it = litem[li];
    const XT* xrow = X + row * M;
    const double* z = E.z + e0;
    o[0] = 1.0;
    for (int k = 1; k < n; ++k) o[k] = elem_sat<XT>(E, e0 + k, xrow[E.feat[e0 + k]]) ? 1.0 : 0.0;
    serial_extend(w, z, o, n, -1);
    int va = V.vptr[it], vb = V.vptr[it + 1];
    for (int k = 1; k < n; ++k) {
      double s = serial_unwound(w, z[k], o[k], n) * (o[k] - z[k]);
      int f = E.feat[e0 + k];
      double* base = interactions ? phi + ((row * M1 + f) * M1 + f) * K : phi + (row * M1 + f) * K;
      for (int q = va; q < vb; ++q) out_add(base + V.vgroup[q], s * V.vval[q], V.det);
    }
    if (!interactions) continue;
    for (int c = 1; c < n; ++c) {
      serial_extend(w2, z, o, n - 1, c);
      int fj = E.feat[e0 + c];
      double dj = o[c] - z[c];
      for (int k = 1; k < n; ++k) {
        if (k == c) continue;
        double x = serial_unwound(w2, z[k], o[k], n - 1) * (o[k] - z[k]) * dj * 0.5;
        int f = E.feat[e0 + k];
        double* off = phi + ((row * M1 + f) * M1 + fj) * K;
        double* dia = phi + ((row * M1 + f) * M1 + f) * K;
        for (int q = va; q < vb; ++q) {
          if (f < fj) out_add(off + V.vgroup[q], x * V.vval[q], V.det);   // upper triangle (see mirror_upper)
          out_add(dia + V.vgroup[q], -x * V.vval[q], V.det);
        }
      }
    }
  }
}

// Long paths, interventional. scratch: lmax doubles per thread (per-element accumulators).
template <typename XT>
__device__ __forceinline__ void long_interventional_body(const XT* X, long long n_rows, const XT* R,
                                                         long long n_bg, int M, int K, const long long* lstart,
                                                         const int* llen, const int* litem, long long n_long,
                                                         const Elems& E, const Vals& V, const double* scale,
                                                         const double* Wt, int wstride, double* phi,
                                                         double* scratch, int lmax) {
  long long nthreads = (long long)gridDim.x * blockDim.x;
  long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  double* acc = scratch + tid * (long long)lmax;
  double inv_bg = 1.0 / (double)n_bg;
  for (long long t = tid; t < n_rows * n_long; t += nthreads) {
    long long row = t / n_long, li = t - row * n_long;
    long long e0 = lstart[li];
    int n = llen[li], it = litem[li];
    const XT* xrow = X + row * M;
    int va = V.vptr[it], vb = V.vptr[it + 1];
    int nloops = scale ? vb - va : 1;
    for (int qq = 0; qq < nloops; ++qq) {
      int g = scale ? V.vgroup[va + qq] : 0;
      for (int k = 1; k < n; ++k) acc[k] = 0.0;
      for (long long rr = 0; rr < n_bg; ++rr) {
        const XT* rrow = R + rr * M;
        int s = 0, nn = 0;
        bool neither = false;
        for (int k = 1; k < n; ++k) {
          int f = E.feat[e0 + k];
          bool a = elem_sat<XT>(E, e0 + k, xrow[f]);
          bool b = elem_sat<XT>(E, e0 + k, rrow[f]);
          if (!a && !b) { neither = true; break; }
          s += (a && !b);
          nn += (a != b);
        }
        if (neither || nn == 0) continue;
        double sc = scale ? scale[(row * n_bg + rr) * K + g] : 1.0;
        double wp = s >= 1 ? Wt[(s - 1) * wstride + nn] * sc : 0.0;
        double wm = s < nn ? -Wt[s * wstride + nn] * sc : 0.0;
        for (int k = 1; k < n; ++k) {
          int f = E.feat[e0 + k];
          bool a = elem_sat<XT>(E, e0 + k, xrow[f]);
          bool b = elem_sat<XT>(E, e0 + k, rrow[f]);
          if (a && !b) acc[k] += wp;
          else if (b && !a) acc[k] += wm;
        }
      }
      for (int k = 1; k < n; ++k) {
        double* base = phi + (row * (M + 1) + E.feat[e0 + k]) * K;
        if (scale) {
          out_add(base + g, acc[k] * inv_bg * V.vval[va + qq], V.det);
        } else {
          for (int q = va; q < vb; ++q) out_add(base + V.vgroup[q], acc[k] * inv_bg * V.vval[q], V.det);
        }
      }
    }
  }
}


// Builds the tables of the table variant: one thread per (path, pattern of satisfied elements).
extern "C" __global__ void build_tables(const long long* t_root, const int* t_d, const long long* t_off,
                                        const long long* t_pat_ptr, long long n_items, const double* zf,
                                        double* table) {
  long long total = t_pat_ptr[n_items];
  long long nthreads = (long long)gridDim.x * blockDim.x;
  double w[TABLE_DMAX + 1], o[TABLE_DMAX + 1];
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += nthreads) {
    long long lo = 0, hi = n_items - 1;
    while (lo < hi) {
      long long mid = (lo + hi + 1) >> 1;
      if (t_pat_ptr[mid] <= idx) lo = mid; else hi = mid - 1;
    }
    int d = t_d[lo];
    long long pat = idx - t_pat_ptr[lo];
    const double* z = zf + t_root[lo];
    o[0] = 1.0;
    for (int k = 1; k <= d; ++k) o[k] = (double)((pat >> (k - 1)) & 1);
    serial_extend(w, z, o, d + 1, -1);
    for (int k = 1; k <= d; ++k)
      table[t_off[lo] + pat * d + (k - 1)] = serial_unwound(w, z[k], o[k], d + 1) * (o[k] - z[k]);
  }
}

// Builds the interaction tables (layout: inter_table_body): one thread per (path, pattern). Same arithmetic as the
// long-path kernel: the diagonal is phi_k minus the pair terms, a pair term extends the path without its partner.
extern "C" __global__ void build_inter_tables(const long long* t_root, const int* t_d, const long long* t_off,
                                              const long long* t_pat_ptr, long long n_items, const double* zf,
                                              double* table) {
  long long total = t_pat_ptr[n_items];
  long long nthreads = (long long)gridDim.x * blockDim.x;
  double w[TABLE_DMAX + 1], o[TABLE_DMAX + 1], w2[TABLE_DMAX + 1], diag[TABLE_DMAX];
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += nthreads) {
    long long lo = 0, hi = n_items - 1;
    while (lo < hi) {
      long long mid = (lo + hi + 1) >> 1;
      if (t_pat_ptr[mid] <= idx) lo = mid; else hi = mid - 1;
    }
    int d = t_d[lo], T = d / 2 + 1;
    long long pat = idx - t_pat_ptr[lo];
    const double* z = zf + t_root[lo];
    double* out = table + t_off[lo] + pat * (long long)(T * d);
    o[0] = 1.0;
    for (int k = 1; k <= d; ++k) o[k] = (double)((pat >> (k - 1)) & 1);
    serial_extend(w, z, o, d + 1, -1);
    for (int k = 1; k <= d; ++k) diag[k - 1] = serial_unwound(w, z[k], o[k], d + 1) * (o[k] - z[k]);
    for (int q = d; q < T * d; ++q) out[q] = 0.0;
    for (int c = 1; c <= d; ++c) {
      serial_extend(w2, z, o, d, c);
      double dj = o[c] - z[c];
      for (int k = 1; k <= d; ++k) {
        if (k == c) continue;
        double x = serial_unwound(w2, z[k], o[k], d) * (o[k] - z[k]) * dj * 0.5;
        diag[k - 1] -= x;
        int rr = k - 1, t = (c - k + d) % d;
        if (pair_slot(rr, t, d)) out[t * d + rr] = x;
      }
    }
    for (int k = 0; k < d; ++k) out[k] = diag[k];
  }
}

// Copies the upper triangle of each row's (M1 x M1 x K) interaction matrix to the lower one (which is still zero),
// and adds the bias at [M, M]. With inv (fixed-point sums, see "Reproducible sums") each upper or diagonal entry is
// first turned into a double, times inv[g]. A row that fits MIRROR_TILE doubles goes through shared memory, one block
// a row: its upper entries are read and converted there, then the whole row is written back in order (a mirror
// entry written straight to global memory lands one column apart from its neighbour's, a sector each: a strided
// store pass several times the cost of the row's two coalesced passes). Larger rows take one thread per entry: it
// reads and writes only its own entry and writes its mirror, which no thread reads, so one pass does both in place.
// Both give every entry the same value.
#define MIRROR_TILE 3072

extern "C" __global__ void mirror_upper(double* phi, long long n_rows, int M1, int K, const double* bias,
                                        const double* inv) {
  __shared__ double s_row[MIRROR_TILE];
  long long per = (long long)M1 * M1 * K;
  if (per <= MIRROR_TILE) {
    int P = (int)per;
    for (long long row = blockIdx.x; row < n_rows; row += gridDim.x) {
      double* p = phi + row * per;
      for (int idx = threadIdx.x; idx < P; idx += blockDim.x) {
        int ij = idx / K, g = idx - ij * K, i = ij / M1, j = ij - i * M1;
        if (j < i) continue;
        double v = inv ? (double)((const long long*)p)[idx] * inv[g] : p[idx];
        if (i == M1 - 1 && j == M1 - 1) v += bias[g];
        s_row[idx] = v;
      }
      __syncthreads();
      for (int idx = threadIdx.x; idx < P; idx += blockDim.x) {
        int ij = idx / K, g = idx - ij * K, i = ij / M1, j = ij - i * M1;
        p[idx] = j >= i ? s_row[idx] : s_row[(j * M1 + i) * K + g];
      }
      __syncthreads();
    }
    return;
  }
  long long total = n_rows * per;
  long long nthreads = (long long)gridDim.x * blockDim.x;
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += nthreads) {
    long long row = idx / per, rem = idx - row * per;
    long long ij = rem / K;
    int g = (int)(rem - ij * K), i = (int)(ij / M1), j = (int)(ij - (long long)i * M1);
    if (j < i) continue;
    double v = inv ? (double)((const long long*)phi)[idx] * inv[g] : phi[idx];
    if (i == M1 - 1 && j == M1 - 1) v += bias[g];
    phi[idx] = v;
    if (j > i) phi[row * per + ((long long)j * M1 + i) * K + g] = v;
  }
}

// Turns fixed-point sums (int64 bits in place) into doubles: a[idx] = sum * inv[idx % K], inv[g] a power of two.
extern "C" __global__ void fixed_to_double(double* a, long long n, int K, const double* inv) {
  long long nthreads = (long long)gridDim.x * blockDim.x;
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += nthreads)
    a[idx] = (double)((const long long*)a)[idx] * inv[idx % K];
}

// fixed_to_double for SHAP values (n, W / K, K) whose last column (of W / K) also adds the bias: the same rounded
// product, then the same rounded sum as a separate pass would give (__dmul_rn / __dadd_rn: no fused multiply-add), in
// one launch instead of two (a visible share of a sub-millisecond call).
extern "C" __global__ void fixed_to_double_bias(double* a, long long n, int K, const double* inv, const double* bias,
                                                int W) {
  long long nthreads = (long long)gridDim.x * blockDim.x;
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += nthreads) {
    int k = (int)(idx % K);
    double v = __dmul_rn((double)((const long long*)a)[idx], inv[k]);
    if (idx % W >= W - K) v = __dadd_rn(v, bias[k]);
    a[idx] = v;
  }
}

// ------------------------------------------------------------------------------------------------------------------
// extern "C" entry points, one per input precision
// ------------------------------------------------------------------------------------------------------------------

#define ELEM_PARAMS(XT)                                                                                               \
  const int *feat, const XT *lo, const XT *hi, const unsigned char *flags, const int *cptr, const int *cnw,           \
      const unsigned int *cwords, const double *zf, const int *gstart, const int *glen, const int *item,              \
      const int *vptr, const int *vgroup, const double *vval, int det
#define MAKE_EV                                                                                                       \
  Elems E{feat, lo, hi, flags, cptr, cnw, cwords, zf, gstart, glen, item};                                            \
  Vals V{vptr, vgroup, vval, det};

// The two table kernels (SHAP values, interactions) share one signature: NAME##_body does the work.
#define TABLE_KERNEL(XT, SUF, NAME)                                                                                   \
  extern "C" __global__ void NAME##_##SUF(const XT* X, long long n_rows, int M, int K, const long long* bin_ptr,      \
                                          long long n_bins, int rpw, int bgroup, ELEM_PARAMS(XT),                     \
                                          const long long* etoff, const double* table, double* phi) {                 \
    MAKE_EV                                                                                                           \
    NAME##_body<XT>(X, n_rows, M, K, bin_ptr, n_bins, rpw, bgroup, E, V, etoff, table, phi);                          \
  }

// SHAP values / interactions by quadrature, for paths of at most 2 * QM elements (QM = 4, 8, 12, 16); gl holds the
// rules (s_gl).
#define QUAD_KERNEL(XT, SUF, NAME, QM)                                                                                \
  extern "C" __global__ void NAME##QM##_##SUF(const XT* X, long long n_rows, int M, int K,                      \
                                                  const long long* bin_ptr, long long n_bins, int rpw, int bgroup,    \
                                                  ELEM_PARAMS(XT), const double* gl, double* phi) {                   \
    __shared__ double s_gl[QM * (QM + 1)];                                                                            \
    for (int k = threadIdx.x; k < QM * (QM + 1); k += blockDim.x) s_gl[k] = gl[k];                                    \
    __syncthreads();                                                                                                  \
    MAKE_EV                                                                                                           \
    NAME##_body<XT, QM>(X, n_rows, M, K, bin_ptr, n_bins, rpw, bgroup, E, V, phi, s_gl);                              \
  }

#define DEFINE_KERNELS(XT, SUF)                                                                                       \
  extern "C" __global__ void shap_##SUF(const XT* X, long long n_rows, int M, int K, const long long* bin_ptr,        \
                                        long long n_bins, int rpw, int bgroup, ELEM_PARAMS(XT), double* phi) {        \
    __shared__ double s_inv[64];                                                                                      \
    fill_inv(s_inv);                                                                                                  \
    MAKE_EV                                                                                                           \
    shap_body<XT>(X, n_rows, M, K, bin_ptr, n_bins, rpw, bgroup, E, V, phi, s_inv);                                   \
  }                                                                                                                   \
  extern "C" __global__ void shap_smem_##SUF(const XT* X, long long n_rows, int M, int K,                             \
                                             const long long* bin_ptr, long long n_bins, int rpw, int bgroup,         \
                                             ELEM_PARAMS(XT), double* phi) {                                          \
    __shared__ double s_inv[64];                                                                                      \
    extern __shared__ double s_acc[];                                                                                 \
    fill_inv(s_inv);                                                                                                  \
    MAKE_EV                                                                                                           \
    shap_smem_body<XT>(X, n_rows, M, K, bin_ptr, n_bins, rpw, bgroup, E, V, phi, s_inv, s_acc);                       \
  }                                                                                                                   \
  TABLE_KERNEL(XT, SUF, shap_table)                                                                                   \
  extern "C" __global__ void shap_table_block_##SUF(const XT* X, long long n_rows, int M, int K,                     \
                                                    const long long* bin_ptr, long long n_bins, int rpw, int R,       \
                                                    ELEM_PARAMS(XT), const int* eslot, const long long* gslot,        \
                                                    const int* soff, const long long* etoff, const double* table,     \
                                                    double* phi) {                                                    \
    extern __shared__ unsigned long long s_bacc[];                                                                    \
    MAKE_EV                                                                                                           \
    Slots Sl{eslot, gslot, soff};                                                                                     \
    shap_table_block_body<XT>(X, n_rows, M, K, bin_ptr, n_bins, rpw, R, E, V, Sl, etoff, table, phi, s_bacc);         \
  }                                                                                                                   \
  extern "C" __global__ void shap_block_##SUF(const XT* X, long long n_rows, int M, int K, const long long* bin_ptr,  \
                                              long long n_bins, int rpw, int R, ELEM_PARAMS(XT), const int* eslot,    \
                                              const long long* gslot, const int* soff, double* phi) {                 \
    __shared__ double s_inv[64];                                                                                      \
    extern __shared__ unsigned long long s_bacc[];                                                                    \
    fill_inv(s_inv);                                                                                                  \
    MAKE_EV                                                                                                           \
    Slots Sl{eslot, gslot, soff};                                                                                     \
    shap_block_body<XT>(X, n_rows, M, K, bin_ptr, n_bins, rpw, R, E, V, Sl, phi, s_inv, s_bacc);                      \
  }                                                                                                                   \
  TABLE_KERNEL(XT, SUF, inter_table)                                                                                  \
  extern "C" __global__ void __launch_bounds__(256, 4)                                                             \
      inter_table_block_##SUF(const XT* X, long long n_rows, int M, int K, const long long* bin_ptr,                  \
                              long long n_bins, int rpw, int R, ELEM_PARAMS(XT), const int* eslot,                    \
                              const long long* gslot, const int* soff, const long long* etoff,                        \
                              const double* table, double* phi) {                                                     \
    extern __shared__ unsigned long long s_bacc[];                                                                    \
    MAKE_EV                                                                                                           \
    Slots Sl{eslot, gslot, soff};                                                                                     \
    inter_table_block_body<XT>(X, n_rows, M, K, bin_ptr, n_bins, rpw, R, E, V, Sl, etoff, table, phi, s_bacc);        \
  }                                                                                                                   \
  extern "C" __global__ void interactions_##SUF(const XT* X, long long n_rows, int M, int K,                          \
                                                const long long* bin_ptr, long long n_bins, int rpw, int bgroup,      \
                                                ELEM_PARAMS(XT), double* phi) {                                       \
    __shared__ double s_inv[64];                                                                                      \
    fill_inv(s_inv);                                                                                                  \
    MAKE_EV                                                                                                           \
    interactions_body<XT>(X, n_rows, M, K, bin_ptr, n_bins, rpw, bgroup, E, V, phi, s_inv);                           \
  }                                                                                                                   \
  QUAD_KERNEL(XT, SUF, inter_quad, 4)                                                                                 \
  QUAD_KERNEL(XT, SUF, inter_quad, 8)                                                                                 \
  QUAD_KERNEL(XT, SUF, inter_quad, 12)                                                                                \
  QUAD_KERNEL(XT, SUF, inter_quad, 16)                                                                                \
  QUAD_KERNEL(XT, SUF, shap_quad, 4)                                                                                  \
  QUAD_KERNEL(XT, SUF, shap_quad, 8)                                                                                  \
  QUAD_KERNEL(XT, SUF, shap_quad, 12)                                                                                 \
  QUAD_KERNEL(XT, SUF, shap_quad, 16)                                                                                 \
  extern "C" __global__ void interventional_##SUF(const XT* X, long long n_rows, const XT* R, long long n_bg,         \
                                                  int M, int K, const long long* bin_ptr, long long n_bins,           \
                                                  int rpw, int bgroup, ELEM_PARAMS(XT), const double* scale,          \
                                                  const double* Wt, int wstride, double* phi) {                       \
    MAKE_EV                                                                                                           \
    interventional_body<XT>(X, n_rows, R, n_bg, M, K, bin_ptr, n_bins, rpw, bgroup, E, V, scale, Wt, wstride, phi);   \
  }                                                                                                                   \
  extern "C" __global__ void predict_##SUF(const XT* X, long long n_rows, int M, int K, const long long* istart,      \
                                           const int* ilen, long long n_items, ELEM_PARAMS(XT), double* out) {        \
    MAKE_EV                                                                                                           \
    predict_body<XT>(X, n_rows, M, K, istart, ilen, n_items, E, V, out);                                              \
  }                                                                                                                   \
  extern "C" __global__ void long_##SUF(const XT* X, long long n_rows, int M, int K, const long long* lstart,         \
                                        const int* llen, const int* litem, long long n_long, ELEM_PARAMS(XT),         \
                                        double* phi, double* scratch, int lmax, int interactions) {                   \
    MAKE_EV                                                                                                           \
    long_body<XT>(X, n_rows, M, K, lstart, llen, litem, n_long, E, V, phi, scratch, lmax, interactions);              \
  }                                                                                                                   \
  extern "C" __global__ void long_interventional_##SUF(                                                               \
      const XT* X, long long n_rows, const XT* R, long long n_bg, int M, int K, const long long* lstart,              \
      const int* llen, const int* litem, long long n_long, ELEM_PARAMS(XT), const double* scale,                      \
      const double* Wt, int wstride, double* phi, double* scratch, int lmax) {                                        \
    MAKE_EV                                                                                                           \
    long_interventional_body<XT>(X, n_rows, R, n_bg, M, K, lstart, llen, litem, n_long, E, V, scale, Wt,              \
                                 wstride, phi, scratch, lmax);                                                        \
  }

DEFINE_KERNELS(float, f32)
DEFINE_KERNELS(double, f64)
