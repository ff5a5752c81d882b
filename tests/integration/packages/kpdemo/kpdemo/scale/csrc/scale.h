#pragma once
// Threads per block of the scale kernel (a header the integration tests edit).
#define SCALE_THREADS 256
