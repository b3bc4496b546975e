// SVG per-link timeline of a simulated schedule: a row per link that carried
// data, a bar per message hop from its start to its end on the wire, coloured
// by the rank that sent it, with a time axis in microseconds.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "braid/sim.h"

namespace braid {

std::string render_svg(const Schedule& s, const Topology& t, const SimResult& r) {
  std::map<int, int> row_of;  // link -> row
  for (const SimTransfer& x : r.transfers) row_of.emplace(x.link, 0);
  int rows = 0;
  for (auto& [link, row] : row_of) row = rows++;
  const double left = 170, width = 900, row_h = 14, top = 40;
  const double span = r.time_us > 0 ? r.time_us : 1;
  const double height = top + rows * row_h + 40;
  std::ostringstream svg;
  svg << fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"monospace\" font-size=\"10\">\n",
      left + width + 20, height);
  svg << fmt::format("<text x=\"10\" y=\"16\" font-size=\"13\">{} ({} ranks) on {}: {:.2f} us</text>\n", s.name,
                     s.nranks, t.name, r.time_us);
  for (auto& [link, row] : row_of) {
    const Link& l = t.links[link];
    double y = top + row * row_h;
    svg << fmt::format("<text x=\"10\" y=\"{}\">{:>3} -&gt; {:<3} {}</text>\n", y + row_h - 4, l.src, l.dst,
                       link_kind_name(l.kind));
    svg << fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#eee\"/>\n", left, y + row_h, left + width,
                       y + row_h);
  }
  for (const SimTransfer& x : r.transfers) {
    double y = top + row_of[x.link] * row_h + 1;
    double x0 = left + x.start_us / span * width, w = std::max(0.5, (x.end_us - x.start_us) / span * width);
    int hue = int(360.0 * x.origin / std::max(1, s.nranks));
    svg << fmt::format(
        "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{}\" fill=\"hsl({},70%,55%)\" stroke=\"#333\" "
        "stroke-width=\"0.3\"><title>rank {} chunk {}: {} -&gt; {}, {:.3f}..{:.3f} us</title></rect>\n",
        x0, y, w, row_h - 2, hue, x.origin,
        x.chunks > 1 ? fmt::format("{}..{}", x.chunk, x.chunk + x.chunks - 1) : fmt::format("{}", x.chunk), x.src, x.dst,
        x.start_us, x.end_us);
  }
  double axis_y = top + rows * row_h + 12;
  for (int i = 0; i <= 10; ++i) {
    double x = left + width * i / 10;
    svg << fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#999\"/>\n", x, top, axis_y - 8);
    svg << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{:.1f}</text>\n", x, axis_y + 4, span * i / 10);
  }
  svg << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">time (us)</text>\n", left + width / 2, axis_y + 20);
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace braid
