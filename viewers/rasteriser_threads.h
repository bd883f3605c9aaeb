#pragma once
// Under software OpenGL (Mesa's llvmpipe: Xvfb, remote desktops, machines without a GPU) the window's frames
// are drawn by rasteriser threads, one per core by default. When the engine's threads take every core as
// well, those threads share the CPU with the model, and a frame that takes 18 ms on an idle machine took up to
// 45-70 ms while a run was in progress: the window fell below 20 fps. Twice as many rasteriser threads as
// cores win the draw a larger share of the CPU for the few ms it lasts (measured on 2 cores: drawn frames
// median 20 -> 18 ms, longest frame 42-49 -> 36 ms, runs no slower). A worker that waited for each frame
// instead kept frames short too, but made every run 15-20 % slower.
#include <string>

namespace kvscope::viewers {

// Sets LP_NUM_THREADS to twice the cores, before any OpenGL context exists, when the engine's
// `engine_threads` take every core and the user has not set it. Returns what it did, for the log ("" when
// nothing).
std::string share_cpu_with_rasteriser(int engine_threads);

}  // namespace kvscope::viewers
