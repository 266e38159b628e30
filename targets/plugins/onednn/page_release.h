// Where a packed weight's source pages go once packed (weight_packing.h's refresh): back to
// the page cache where they are a file's.
#pragma once
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

namespace odla_onednn {
namespace {

// /proc/self/pagemap, opened by the first release_file_pages given it and closed with it.
struct Pagemap {
  int fd = -2;  // -2: not opened yet
  ~Pagemap() {
    if (fd >= 0) close(fd);
  }
};

// A packed weight's source, once packed, is read again only if the constant's address
// changes. Where it is memory-mapped from a file (the engine cache's weights), its pages
// leave the process (mapped again from the page cache should anything read them), so the
// original and its packed copy are not both held. /proc/self/pagemap tells a file's pages
// (or shared memory's, which keeps its contents too) from the process's own: a page it wrote
// (copy-on-write) and anonymous memory stay. Not MADV_PAGEOUT: it drops the pages from the
// page cache too, and the next process loading the engine would read them from disk.
void release_file_pages(Pagemap& pagemap, void* data, size_t size) {
  auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  uintptr_t end = (reinterpret_cast<uintptr_t>(data) + size) / page * page;
  if (end <= begin) return;
  if (pagemap.fd == -2) pagemap.fd = open("/proc/self/pagemap", O_RDONLY);
  if (pagemap.fd < 0) return;
  // One 64-bit entry a page; bit 63 present, bit 61 a file page.
  std::vector<uint64_t> entries((end - begin) / page);
  size_t bytes = entries.size() * sizeof(uint64_t);
  ssize_t got = pread(pagemap.fd, entries.data(), bytes,
                      static_cast<off_t>(begin / page * sizeof(uint64_t)));
  if (got != static_cast<ssize_t>(bytes)) return;
  constexpr uint64_t kFilePage = (1ull << 63) | (1ull << 61);
  for (size_t first = 0; first < entries.size();) {
    size_t last = first;
    while (last < entries.size() && (entries[last] & kFilePage) == kFilePage) ++last;
    if (last > first) madvise(reinterpret_cast<void*>(begin + first * page),
                              (last - first) * page, MADV_DONTNEED);
    first = last + 1;
  }
}

}  // namespace
}  // namespace odla_onednn
