#pragma once
// Build options for Dear ImGui and ImPlot, shared by every file that includes imgui.h.

// 32-bit indices: a full-resolution heatmap or a long eviction timeline exceeds 64K vertices in one
// draw list, and the software rasteriser (soft_render.cpp) then needs no vertex-offset bookkeeping.
#define ImDrawIdx unsigned int
#define IMGUI_DISABLE_OBSOLETE_FUNCTIONS
