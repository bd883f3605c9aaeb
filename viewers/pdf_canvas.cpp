#include "viewers/pdf_canvas.h"

#include <libdeflate.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "core/common/error.h"
#include "viewers/font_metrics.h"
#include "viewers/font_subset.h"

namespace kvscope::viewers {

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  std::string s = buf;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

std::string rgb(Rgba c) { return num(c.r / 255.0) + " " + num(c.g / 255.0) + " " + num(c.b / 255.0); }

std::string deflate(const std::string& bytes) {
  std::unique_ptr<libdeflate_compressor, void (*)(libdeflate_compressor*)> c(libdeflate_alloc_compressor(9),
                                                                             libdeflate_free_compressor);
  if (!c) throw Error("PDF: cannot allocate a deflate compressor");
  std::string out(libdeflate_zlib_compress_bound(c.get(), bytes.size()), '\0');
  const std::size_t n = libdeflate_zlib_compress(c.get(), bytes.data(), bytes.size(), out.data(), out.size());
  if (n == 0) throw Error("PDF: deflate failed");
  out.resize(n);
  return out;
}

// A PDF string literal in WinAnsi: characters outside printable ASCII become '?' (the embedded widths
// cover 32..126 only).
std::string pdf_string(const std::string& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) == 0x80) continue;
    if (c == '(' || c == ')' || c == '\\') out += '\\';
    out += c >= 32 && c <= 126 ? static_cast<char>(c) : '?';
  }
  return out + ")";
}

std::string stream(const std::string& dict_entries, const std::string& data) {
  return "<< " + dict_entries + " /Length " + std::to_string(data.size()) + " >>\nstream\n" + data + "\nendstream";
}

}  // namespace

PdfCanvas::PdfCanvas(double width, double height, double dpi) : width_(width), height_(height), dpi_(dpi) {
  const double s = 72.0 / dpi_;
  // Figure pixels, y down, as every other backend draws them.
  content_ << "1 0 0 1 0 0 cm " << num(s) << " 0 0 " << num(-s) << " 0 " << num(height_ * s) << " cm\n";
  content_ << "1 1 1 rg 0 0 " << num(width_) << " " << num(height_) << " re f\n1 J 1 j\n";
}

void PdfCanvas::set_stroke(const Stroke& s) {
  content_ << rgb(s.color) << " RG " << num(s.width) << " w [";
  for (double d : s.dash) content_ << num(d) << " ";
  content_ << "] 0 d\n";
}

void PdfCanvas::set_fill(Rgba c, double opacity) {
  const int key = static_cast<int>(std::lround(std::clamp(opacity, 0.0, 1.0) * 1000));
  auto it = opacities_.find(key);
  if (it == opacities_.end()) it = opacities_.emplace(key, "GS" + std::to_string(opacities_.size())).first;
  content_ << "/" << it->second << " gs " << rgb(c) << " rg\n";
}

void PdfCanvas::line(Point a, Point b, const Stroke& s) {
  set_stroke(s);
  content_ << num(a[0]) << " " << num(a[1]) << " m " << num(b[0]) << " " << num(b[1]) << " l S\n";
}

void PdfCanvas::polyline(const std::vector<Point>& points, const Stroke& s) {
  if (points.empty()) return;
  set_stroke(s);
  for (std::size_t i = 0; i < points.size(); ++i)
    content_ << num(points[i][0]) << " " << num(points[i][1]) << (i ? " l\n" : " m\n");
  content_ << "S\n";
}

void PdfCanvas::polygon(const std::vector<Point>& points, Rgba fill, double opacity) {
  if (points.size() < 3) return;
  set_fill(fill, opacity);
  for (std::size_t i = 0; i < points.size(); ++i)
    content_ << num(points[i][0]) << " " << num(points[i][1]) << (i ? " l\n" : " m\n");
  content_ << "h f\n";
  set_fill(fill, 1.0);
}

void PdfCanvas::rect(double x, double y, double w, double h, Rgba fill, double opacity) {
  set_fill(fill, opacity);
  content_ << num(x) << " " << num(y) << " " << num(w) << " " << num(h) << " re f\n";
  if (opacity < 1.0) set_fill(fill, 1.0);
}

void PdfCanvas::rect_outline(double x, double y, double w, double h, const Stroke& s) {
  set_stroke(s);
  content_ << num(x) << " " << num(y) << " " << num(w) << " " << num(h) << " re S\n";
}

void PdfCanvas::circle(Point c, double r, const Rgba* fill, const Stroke* outline) {
  const double k = 0.5523 * r;  // the Bezier control distance of a quarter circle
  const double x = c[0], y = c[1];
  if (fill) set_fill(*fill, 1.0);
  if (outline) set_stroke(*outline);
  content_ << num(x + r) << " " << num(y) << " m " << num(x + r) << " " << num(y + k) << " " << num(x + k) << " "
           << num(y + r) << " " << num(x) << " " << num(y + r) << " c " << num(x - k) << " " << num(y + r) << " "
           << num(x - r) << " " << num(y + k) << " " << num(x - r) << " " << num(y) << " c " << num(x - r) << " "
           << num(y - k) << " " << num(x - k) << " " << num(y - r) << " " << num(x) << " " << num(y - r) << " c "
           << num(x + k) << " " << num(y - r) << " " << num(x + r) << " " << num(y - k) << " " << num(x + r) << " "
           << num(y) << " c " << (fill && outline ? "b" : fill ? "f" : "S") << "\n";
}

void PdfCanvas::text(double x, double y, const std::string& text, const TextStyle& st) {
  if (text.empty()) return;
  const bool bold = st.bold && (figure_font().bold_bytes.size() > 0 || !figure_font().loaded());
  used_bold_ |= bold;
  const double shift = st.anchor * figure_font().text_width(text, st.size, bold);
  set_fill(st.color, 1.0);
  content_ << "BT /" << (bold ? "F2 " : "F1 ") << num(st.size) << " Tf ";
  if (st.upright) content_ << "0 -1 -1 0 " << num(x) << " " << num(y + shift) << " Tm ";
  else content_ << "1 0 0 -1 " << num(x - shift) << " " << num(y) << " Tm ";
  content_ << pdf_string(text) << " Tj ET\n";
}

void PdfCanvas::image(double x, double y, double w, double h, const Image& image) {
  if (image.empty()) return;
  images_.push_back(image);
  content_ << "q " << num(w) << " 0 0 " << num(-h) << " " << num(x) << " " << num(y + h) << " cm /Im"
           << images_.size() - 1 << " Do Q\n";
}

void PdfCanvas::clip_begin(double x, double y, double w, double h) {
  content_ << "q " << num(x) << " " << num(y) << " " << num(w) << " " << num(h) << " re W n\n";
}

void PdfCanvas::clip_end() { content_ << "Q\n"; }

std::string PdfCanvas::finish() {
  // Objects 1.. in order; the page's resources name them by number.
  std::vector<std::string> objects;
  auto add = [&](std::string body) {
    objects.push_back(std::move(body));
    return static_cast<int>(objects.size());
  };
  auto ref = [](int n) { return std::to_string(n) + " 0 R"; };
  add("<< /Type /Catalog /Pages 2 0 R >>");
  add("");  // pages, filled in below
  add("");  // page
  const int content = add(stream("/Filter /FlateDecode", deflate(content_.str())));
  const FigureFont& font = figure_font();
  auto font_object = [&](bool bold) {
    const std::string base = bold ? "DejaVuSans-Bold" : "DejaVuSans";
    const std::string& bytes = bold ? font.bold_bytes : font.regular_bytes;
    if (!font.loaded() || bytes.empty())
      return add(std::string("<< /Type /Font /Subtype /Type1 /BaseFont /") + (bold ? "Helvetica-Bold" : "Helvetica") +
                 " /Encoding /WinAnsiEncoding >>");
    // The glyphs of characters 32..126 only (WinAnsi text here shows no others): a subset, named as PDF names them
    // (a tag of six capitals, '+', the font), about 40 KB instead of 700.
    std::string embedded = bytes, name = base;
    try {
      embedded = subset_truetype(bytes, bold ? font.bold_glyphs : font.glyphs);
      name = "KVSASC+" + base;
    } catch (const std::exception&) {
      embedded = bytes;  // a font this cannot cut is embedded whole
    }
    const int file = add(stream("/Filter /FlateDecode /Length1 " + std::to_string(embedded.size()), deflate(embedded)));
    const int descriptor =
        add("<< /Type /FontDescriptor /FontName /" + name +
            " /Flags 32 /FontBBox [-1021 -463 1793 1232] /ItalicAngle 0 /Ascent 928 /Descent -236 /CapHeight 729 "
            "/StemV " + (bold ? "120" : "80") + " /FontFile2 " + ref(file) + " >>");
    std::string widths;
    for (int w : bold ? font.bold_widths : font.widths) widths += std::to_string(w) + " ";
    return add("<< /Type /Font /Subtype /TrueType /BaseFont /" + name +
               " /FirstChar 32 /LastChar 126 /Widths [" + widths + "] /Encoding /WinAnsiEncoding /FontDescriptor " +
               ref(descriptor) + " >>");
  };
  const int f1 = font_object(false);
  const int f2 = used_bold_ ? font_object(true) : f1;
  std::string xobjects;
  for (std::size_t i = 0; i < images_.size(); ++i) {
    const Image& img = images_[i];
    std::string rgb_bytes(static_cast<std::size_t>(img.width) * img.height * 3, '\0');
    for (std::size_t p = 0, q = 0; p < img.rgba.size(); p += 4, q += 3) {
      rgb_bytes[q] = static_cast<char>(img.rgba[p]);
      rgb_bytes[q + 1] = static_cast<char>(img.rgba[p + 1]);
      rgb_bytes[q + 2] = static_cast<char>(img.rgba[p + 2]);
    }
    const int obj = add(stream("/Type /XObject /Subtype /Image /Width " + std::to_string(img.width) + " /Height " +
                                   std::to_string(img.height) +
                                   " /ColorSpace /DeviceRGB /BitsPerComponent 8 /Interpolate false /Filter /FlateDecode",
                               deflate(rgb_bytes)));
    xobjects += "/Im" + std::to_string(i) + " " + ref(obj) + " ";
  }
  std::string states;
  for (const auto& [thousandths, name] : opacities_)
    states += "/" + name + " << /Type /ExtGState /ca " + num(thousandths / 1000.0) + " >> ";
  const double s = 72.0 / dpi_;
  objects[1] = "<< /Type /Pages /Kids [3 0 R] /Count 1 >>";
  objects[2] = "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 " + num(width_ * s) + " " + num(height_ * s) +
               "] /Contents " + ref(content) + " /Resources << /Font << /F1 " + ref(f1) + " /F2 " + ref(f2) +
               " >> /XObject << " + xobjects + ">> /ExtGState << " + states + ">> >> >>";
  std::string out = "%PDF-1.4\n%\xe2\xe3\xcf\xd3\n";
  std::vector<std::size_t> offsets;
  for (std::size_t i = 0; i < objects.size(); ++i) {
    offsets.push_back(out.size());
    out += std::to_string(i + 1) + " 0 obj\n" + objects[i] + "\nendobj\n";
  }
  const std::size_t xref = out.size();
  out += "xref\n0 " + std::to_string(objects.size() + 1) + "\n0000000000 65535 f \n";
  for (std::size_t off : offsets) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "%010zu 00000 n \n", off);
    out += buf;
  }
  out += "trailer\n<< /Size " + std::to_string(objects.size() + 1) + " /Root 1 0 R >>\nstartxref\n" +
         std::to_string(xref) + "\n%%EOF\n";
  return out;
}

}  // namespace kvscope::viewers
