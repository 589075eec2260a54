// doctest entry point of the `cli` tests (they drive the built binary).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
