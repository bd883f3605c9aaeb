#include "viewers/token_strip.h"

#include <imgui.h>

#include <algorithm>
#include <cstdio>

namespace kvscope::viewers {

TokenLayout layout_tokens(const std::vector<float>& widths, float avail, float gap) {
  TokenLayout out;
  float x = 0.0f;
  int line = 0;
  for (float w : widths) {
    if (x > 0.0f && x + w > avail) {
      ++line;
      x = 0.0f;
    }
    out.x.push_back(x);
    out.line.push_back(line);
    x += w + gap;
  }
  out.n_lines = widths.empty() ? 0 : line + 1;
  return out;
}

void TokenStrip::draw(AppState& state) {
  const trace::RunTrace* run = state.active_run();
  if (!run) {
    centered_hint("No run yet.");
    return;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(run));
  const std::string sig = std::string(buf) + std::to_string(run->n_steps()) + "|" + std::to_string(state.sel.step);
  if (sig != signature_) {
    signature_ = sig;
    retention_ = retention(*run, state.sel.step);
  }
  const int n_prompt = static_cast<int>(run->prompt_strings.size());
  const int n = n_prompt + static_cast<int>(run->generated_strings.size());
  ImGui::TextDisabled("%d prompt + %d generated tokens; colour: share of caches holding the token at %s", n_prompt,
                      n - n_prompt, state.sel.step < 0 ? "the end" : ("step " + std::to_string(state.sel.step)).c_str());
  if (state.token >= 0) {
    ImGui::SameLine();
    ImGui::Text("  selected %s", token_label(*run, state.token).c_str());
    ImGui::SameLine();
    if (ImGui::SmallButton("clear")) state.token = -1;
  }
  ImGui::BeginChild("##strip", ImVec2(0, 0), ImGuiChildFlags_None);
  const float pad = 3.0f, gap = 2.0f;
  const float line_h = ImGui::GetTextLineHeight() + 2 * pad + gap;
  std::vector<std::string> labels(n);
  std::vector<float> widths(n);
  for (int i = 0; i < n; ++i) {
    labels[i] = display_token(i < n_prompt ? run->prompt_strings[i] : run->generated_strings[i - n_prompt]);
    widths[i] = ImGui::CalcTextSize(labels[i].c_str()).x + 2 * pad;
  }
  const TokenLayout lay = layout_tokens(widths, ImGui::GetContentRegionAvail().x, gap);
  const std::vector<eval::EvidenceSpan>* evidence = state.evidence_of(state.active);
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  // Only the visible lines are drawn; long prompts have thousands of tokens.
  const float scroll = ImGui::GetScrollY(), view_h = ImGui::GetWindowHeight();
  if (state.token != followed_token_) {
    followed_token_ = state.token;
    scroll_frames_ = 3;
  }
  if (scroll_frames_ > 0 && state.token >= 0 && state.token < n) {
    --scroll_frames_;
    const float y = lay.line[state.token] * line_h;
    if (y < scroll || y + line_h > scroll + view_h) ImGui::SetScrollY(std::max(0.0f, y - view_h / 3));
  }
  const int first_line = std::max(0, static_cast<int>(scroll / line_h) - 1);
  const int last_line = static_cast<int>((scroll + view_h) / line_h) + 1;
  int hovered = -1;
  for (int i = 0; i < n; ++i) {
    if (lay.line[i] < first_line || lay.line[i] > last_line) continue;
    const ImVec2 a(origin.x + lay.x[i], origin.y + lay.line[i] * line_h);
    const ImVec2 b(a.x + widths[i], a.y + line_h - gap);
    const float keep = i < static_cast<int>(retention_.size()) ? retention_[i] : 1.0f;
    const Rgba c = sample_colormap(state.cmap, 0.15f + 0.85f * keep);
    dl->AddRectFilled(a, b, IM_COL32(c.r, c.g, c.b, 255), 3.0f);
    const bool light = 0.299f * c.r + 0.587f * c.g + 0.114f * c.b > 140.0f;
    dl->AddText(ImVec2(a.x + pad, a.y + pad), light ? IM_COL32(10, 10, 10, 255) : IM_COL32(245, 245, 245, 255), labels[i].c_str());
    if (i >= n_prompt) dl->AddRect(a, b, IM_COL32(255, 255, 255, 140), 3.0f);  // generated tokens are outlined
    if (evidence) {
      // Evidence of the selected sample: a bar under the token in its kind's colour.
      for (const auto& s : *evidence)
        if (i >= s.first && i <= s.last) {
          dl->AddRectFilled(ImVec2(a.x, b.y - 3.0f), ImVec2(b.x, b.y), evidence_color(s.kind));
          break;
        }
    }
    if (i == state.token) dl->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(b.x + 1, b.y + 1), IM_COL32(255, 60, 60, 255), 3.0f, 2.0f);
    if (ImGui::IsWindowHovered() && ImGui::IsMouseHoveringRect(a, b)) hovered = i;
  }
  ImGui::Dummy(ImVec2(1, lay.n_lines * line_h));
  if (hovered >= 0) {
    ImGui::BeginTooltip();
    ImGui::Text("%s (%s)", token_label(*run, hovered).c_str(), hovered < n_prompt ? "prompt" : "generated");
    const int id = hovered < n_prompt ? (hovered < static_cast<int>(run->prompt_ids.size()) ? run->prompt_ids[hovered] : -1)
                                      : (hovered - n_prompt < run->n_generated() ? run->generated_ids[hovered - n_prompt] : -1);
    ImGui::Text("token id %d", id);
    if (evidence)
      if (const std::string kinds = evidence_kinds_at(*evidence, hovered); !kinds.empty())
        ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(evidence_color(kinds.substr(0, kinds.find(',')))),
                           "evidence: %s", kinds.c_str());
    if (hovered < static_cast<int>(retention_.size()))
      ImGui::Text("held by %.0f%% of (layer, KV head) caches", retention_[hovered] * 100.0f);
    if (hovered >= n_prompt && hovered - n_prompt < static_cast<int>(run->logprobs.size()))
      ImGui::Text("log p = %.3f", run->logprobs[hovered - n_prompt]);
    ImGui::TextDisabled("click: select everywhere");
    ImGui::EndTooltip();
    if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) state.token = hovered == state.token ? -1 : hovered;
  }
  ImGui::EndChild();
}

}  // namespace kvscope::viewers
