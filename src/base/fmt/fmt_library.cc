// fmt's compiled part, built once for all of braid.
//
// Why not FMT_HEADER_ONLY: then every translation unit compiles fmt's whole
// implementation (float formatting, error reporting, locales), more than half
// of a typical braid file's compile time, in each of CI's three builds.  Why
// not Debian's libfmt.so.9: libnccl.so.2 is preloaded into jobs on machines
// that need not have it.  So the implementation (fmt/format-inl.h) is
// compiled here, into a static library linked into braid's binaries with
// hidden symbols, and the templates that the headers only declare are
// instantiated for the types fmt's headers use them with.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {

template auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;

template locale_ref::locale_ref(const std::locale& loc);
template auto locale_ref::get<std::locale>() const -> std::locale;

template auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template auto thousands_sep_impl(locale_ref) -> thousands_sep_result<wchar_t>;
template auto decimal_point_impl(locale_ref) -> char;
template auto decimal_point_impl(locale_ref) -> wchar_t;

}  // namespace detail
FMT_END_NAMESPACE
