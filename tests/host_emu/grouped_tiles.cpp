// The grouped family's row tiles (csrc/grouped/row_tiles.cuh) on the CPU: one warp counts the
// call's tiles and locates each, as the stream-K schedule and the tile loop do (every lane calls;
// every lane must get the same answer), and reads each tile's routes. One case a line on stdin:
//   routing tok num_experts max_m pick_rows pick_cost pick_other_cost value...
// routing 1 (DeepGEMM rows: the m_indices, one a row), 2 (offsets: the E+1 expert_offsets) or 3
// (masked: the E masked_m counts). One line out a case: the count, whether the tile of `tok` rows
// runs against one of pick_rows rows (picked; 1 where pick_rows is 0), then tiles 0 .. count+1
// (two past the end: the offsets and masked forms find nothing there) as
// first:rows:expert:routes:route_sum, routes counting the tile rows with a route (`route`).
#include "cuda_on_host.h"

#include <iostream>
#include <sstream>
#include <string>

#include "grouped/row_tiles.cuh"

namespace {

template <int ROUTING, int kTok>
void run_case(chord::MoeParams& p) {
  using Rows = typename chord::GroupedRowTiles<ROUTING>::template Of<kTok>;
  std::vector<int> counts(32), picks(32);
  std::vector<std::vector<chord::Located>> found(32);
  // The DeepGEMM form locates by the tile's first row: past the last tile there is no row to read.
  const int past_end = ROUTING == chord::kContiguousRows ? 0 : 2;
  host_emu::run_cta(0, 1, 32, [&] {
    const int lane = threadIdx.x, tiles = Rows::count(p);
    counts[lane] = tiles;
    picks[lane] = ROUTING == chord::kContiguousRows || Rows::picked(p, tiles);  // the rows form is never paired
    for (int y = 0; y < tiles + past_end; ++y) found[lane].push_back(Rows::locate(p, y));
  });
  for (int lane = 1; lane < 32; ++lane) {
    bool same = counts[lane] == counts[0] && picks[lane] == picks[0];
    for (size_t y = 0; same && y < found[0].size(); ++y)
      same = found[lane][y].expert == found[0][y].expert && found[lane][y].first == found[0][y].first &&
             found[lane][y].rows == found[0][y].rows;
    if (!same) return void(std::printf("E lanes disagree\n"));
  }
  std::printf("%d %d", counts[0], picks[0]);
  for (const chord::Located& at : found[0]) {
    long long routes = 0, route_sum = 0;
    for (int row = 0; at.expert >= 0 && row < kTok; ++row) {
      const int32_t r = Rows::route(p, at, row);
      if (r >= 0) ++routes, route_sum += r;
    }
    std::printf(" %d:%d:%d:%lld:%lld", at.first, at.rows, at.expert, routes, route_sum);
  }
  std::printf("\n");
}

template <int ROUTING>
bool run_tok(int tok, chord::MoeParams& p) {
  switch (tok) {
    case 8: return run_case<ROUTING, 8>(p), true;
    case 16: return run_case<ROUTING, 16>(p), true;
    case 24: return run_case<ROUTING, 24>(p), true;
    case 32: return run_case<ROUTING, 32>(p), true;
    case 56: return run_case<ROUTING, 56>(p), true;
    case 64: return run_case<ROUTING, 64>(p), true;
    case 96: return run_case<ROUTING, 96>(p), true;
    case 128: return run_case<ROUTING, 128>(p), true;
    case 240: return run_case<ROUTING, 240>(p), true;
    default: return false;
  }
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    int routing, tok;
    chord::MoeParams p{};
    in >> routing >> tok >> p.num_experts >> p.max_m >> p.pick_rows >> p.pick_cost >> p.pick_other_cost;
    p.pick_first = 1;
    // The values as each form reads them: int64 expert_offsets, int32 masked_m or m_indices.
    std::vector<int64_t> wide;
    std::vector<int32_t> narrow;
    for (long long v; in >> v;) wide.push_back(v), narrow.push_back(static_cast<int32_t>(v));
    p.expert_offsets = wide.data();
    p.masked_m = narrow.data();
    p.m_indices = narrow.data();
    p.num_routes = static_cast<int>(narrow.size());
    const bool ok = routing == chord::kContiguousRows  ? run_tok<chord::kContiguousRows>(tok, p)
                    : routing == chord::kContiguousOffsets ? run_tok<chord::kContiguousOffsets>(tok, p)
                    : routing == chord::kMasked          ? run_tok<chord::kMasked>(tok, p)
                                                         : false;
    if (!ok) return 3;
  }
  return 0;
}
