// .npy, read strictly (see npy.h): the header is a Python dict literal, parsed here as the
// three keys NumPy writes, never evaluated.
#include "npy.h"

#include <cstring>

#include "dtypes.h"
#include "internal.h"

namespace odla_tvm {

namespace {

class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& what) : text_(text), what_(what) {}

  [[noreturn]] void Fail(const std::string& message) const {
    throw Error(ODLA_INVALID_PARAM, what_ + ": " + message);
  }

  void Parse(std::string* descr, bool* fortran, std::vector<int64_t>* shape) {
    Expect('{');
    bool seen[3] = {false, false, false};
    for (Space(); !Take('}'); Space()) {
      std::string key = Quoted();
      Space();
      Expect(':');
      Space();
      if (key == "descr" && !seen[0]) {
        *descr = Quoted();
        seen[0] = true;
      } else if (key == "fortran_order" && !seen[1]) {
        *fortran = Word();
        seen[1] = true;
      } else if (key == "shape" && !seen[2]) {
        Shape(shape);
        seen[2] = true;
      } else {
        Fail("its header has the key '" + key + "' (twice, or not NumPy's)");
      }
      Space();
      if (!Take(',')) {
        Space();
        Expect('}');
        break;
      }
    }
    if (!(seen[0] && seen[1] && seen[2])) Fail("its header lacks descr, fortran_order or shape");
    Space();
    if (at_ != text_.size()) Fail("its header has text after its dict");
  }

 private:
  bool Take(char c) {
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  void Expect(char c) {
    if (!Take(c)) Fail(std::string("its header lacks '") + c + "' at byte " + std::to_string(at_));
  }
  void Space() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\n')) ++at_;
  }
  std::string Quoted() {
    Expect('\'');
    size_t end = text_.find('\'', at_);
    if (end == std::string_view::npos || end - at_ > 64) Fail("its header has a bad string");
    std::string s(text_.substr(at_, end - at_));
    at_ = end + 1;
    return s;
  }
  bool Word() {
    for (const char* word : {"False", "True"})
      if (text_.substr(at_, std::strlen(word)) == word) {
        at_ += std::strlen(word);
        return word[0] == 'T';
      }
    Fail("its header's fortran_order is not True or False");
  }
  void Shape(std::vector<int64_t>* shape) {
    Expect('(');
    for (Space(); !Take(')'); Space()) {
      if (shape->size() == kNpyMaxRank)
        Fail("its shape has more than " + std::to_string(kNpyMaxRank) + " dims");
      size_t start = at_;
      int64_t dim = 0;
      while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') {
        if (__builtin_mul_overflow(dim, 10, &dim) ||
            __builtin_add_overflow(dim, text_[at_] - '0', &dim))
          Fail("its shape has a dim too large");
        ++at_;
      }
      if (at_ == start) Fail("its shape has a dim that is not a non-negative integer");
      shape->push_back(dim);
      Space();
      if (!Take(',')) {
        Space();
        Expect(')');
        break;
      }
    }
  }

  std::string_view text_;
  const std::string& what_;
  size_t at_ = 0;
};

uint32_t Little(std::string_view bytes, size_t at, size_t width) {
  uint32_t value = 0;
  for (size_t i = 0; i < width; ++i)
    value |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
  return value;
}

}  // namespace

Array ParseNpy(std::string_view bytes, const std::string& what) {
  HeaderParser fail("", what);
  if (bytes.size() < 10 || bytes.substr(0, 6) != "\x93NUMPY") fail.Fail("it is not .npy");
  uint8_t major = static_cast<uint8_t>(bytes[6]);
  if (major < 1 || major > 3) fail.Fail(".npy version " + std::to_string(major));
  size_t header_at = major == 1 ? 10 : 12;
  if (bytes.size() < header_at) fail.Fail("its header is truncated");
  size_t header_len = Little(bytes, 8, major == 1 ? 2 : 4);
  if (header_len > kNpyMaxHeader)
    fail.Fail("its header is " + std::to_string(header_len) + " bytes; at most " +
              std::to_string(kNpyMaxHeader));
  if (header_len > bytes.size() - header_at) fail.Fail("its header is truncated");
  std::string descr;
  bool fortran = false;
  Array array;
  HeaderParser(bytes.substr(header_at, header_len), what).Parse(&descr, &fortran, &array.shape);
  const Dtype* dtype = DtypeOfDescr(descr);
  if (dtype == nullptr) fail.Fail("its dtype " + descr + " is not one this library reads");
  if (fortran) fail.Fail("it is Fortran-ordered");
  array.dtype = dtype->dl;
  uint64_t size = dtype->dl.bits / 8;
  for (int64_t dim : array.shape)
    if (__builtin_mul_overflow(size, static_cast<uint64_t>(dim), &size))
      fail.Fail("its shape's size overflows");
  array.data = bytes.substr(header_at + header_len);
  if (array.data.size() != size)
    fail.Fail("it holds " + std::to_string(array.data.size()) + " data bytes; its header says " +
              std::to_string(size));
  return array;
}

std::string NpyBytes(DLDataType dtype, const std::vector<int64_t>& shape, std::string_view data) {
  const Dtype* known = DtypeOfDL(dtype);
  if (known == nullptr) throw Error(ODLA_UNSUPPORTED_DATATYPE, "a tensor has no .npy dtype");
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string header = std::string("{'descr': '") + known->npy +
                       "', 'fortran_order': False, 'shape': (" + dims + "), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');  // data 64-byte aligned
  header += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  return bytes + header + std::string(data);
}

}  // namespace odla_tvm
