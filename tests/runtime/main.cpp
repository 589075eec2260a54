// doctest entry point of the `runtime` suite (CPU model runtime: kernels, model reference, AdamW, dataset).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
