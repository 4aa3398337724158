// IndexedPairedRowTiles (csrc/indexed/paired_blocks.cuh) on the CPU: one CTA builds the call's
// pair-tile table from expert_ids, as every CTA of the dual kernel does, and the tiles are read
// back through locate; beside them the 8-row tiles (IndexedRowTiles<8>, indexed/row_tiles.cuh, at
// block_m / 8 tiles a block) the dual kernel weighs them against. argv: the dispatch's
// PAIRED_COST (an 8-row tile's, a pair tile's). One case a line on stdin:
//   num_blocks block_m num_experts num_tokens_padded sorted_len expert_id...
// One line out a case: the 8-row tiles' count, the pair tiles' (-1 for kTooManyBlocks), whether
// the dual kernel runs the pairs (picked), each pair tile as first:rows:expert, then "|" and each
// 8-row tile the same way.
#include "cuda_on_host.h"

#include <algorithm>
#include <iostream>
#include <sstream>
#include <string>

#include "indexed/paired_blocks.cuh"

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const int short_cost = std::atoi(argv[1]), pair_cost = std::atoi(argv[2]);
  using Pairs = chord::IndexedPairedRowTiles<16>;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    int num_blocks, block_m, num_experts, padded, sorted_len;
    in >> num_blocks >> block_m >> num_experts >> padded >> sorted_len;
    std::vector<int32_t> expert_ids;
    for (int e; in >> e;) expert_ids.push_back(e);
    if ((int)expert_ids.size() != num_blocks) return 3;
    expert_ids.push_back(-7);  // a block past num_blocks: never read (would show as a wrong tile)
    chord::MoeParams p{};
    p.expert_ids = expert_ids.data();
    p.num_tokens_padded = &padded;
    p.num_experts = num_experts;
    p.block_m = block_m;
    p.num_blocks = num_blocks;
    p.ctas_per_block = block_m / 8;  // IndexedRowTiles<8>'s tiles a block
    p.sorted_len = sorted_len;
    p.pick_cost = short_cost;
    p.pick_other_cost = pair_cost;
    p.pick_first = 1;
    // As in the kernel, every thread locates tiles right after the count (here a strided share
    // of them), from a table poisoned beforehand, with the threads run in either order: a tile
    // read before its entry is written reads the poison, the sentinel block past num_blocks
    // (expert -1: no tile of the spec has it).
    std::fill_n(Pairs::table(), Pairs::kTableBytes / 4, num_blocks);
    host_emu::reverse_order = !host_emu::reverse_order;
    std::vector<int> counts(Pairs::kThreads);
    std::vector<chord::Located> located(Pairs::kCapacity);
    host_emu::run_cta(0, 1, Pairs::kThreads, [&] {
      const int tiles = Pairs::count(p);
      counts[threadIdx.x] = tiles;
      for (int t = threadIdx.x; tiles != Pairs::kTooManyBlocks && t < tiles; t += Pairs::kThreads)
        located[t] = Pairs::locate(p, t);
    });
    for (int c : counts)
      if (c != counts[0]) return 4;  // every thread of the CTA must agree
    using Shorts = chord::IndexedRowTiles<8>;
    const int pairs = counts[0], shorts = Shorts::count(p);
    std::printf("%d %d %d", shorts, pairs == Pairs::kTooManyBlocks ? -1 : pairs,
                chord::picked(p, shorts, pairs) ? 0 : 1);
    for (int t = 0; pairs != Pairs::kTooManyBlocks && t < pairs; ++t)
      std::printf(" %d:%d:%d", located[t].first, located[t].rows, located[t].expert);
    std::printf(" |");
    for (int t = 0; t < shorts; ++t) {
      const chord::Located at = Shorts::locate(p, t);
      std::printf(" %d:%d:%d", at.first, at.rows, at.expert);
    }
    std::printf("\n");
  }
  return 0;
}
