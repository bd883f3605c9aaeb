#pragma once
// The project's error types are defined at the bottom of the layering (kernels/error.h) so the kernels
// library can throw them without including core/; core code keeps including this header.
#include "kernels/error.h"
