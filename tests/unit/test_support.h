// Small helpers shared by the unit tests.
#pragma once

#include <string>

#include <doctest/doctest.h>

#include "errors.h"

namespace shardplan::testing {

// The message of the InputError `action` throws; fails the check (and returns "") when it throws none.
template <typename Action>
std::string input_error_message(Action&& action) {
  try {
    action();
  } catch (const InputError& error) {
    return error.what();
  }
  FAIL_CHECK("expected an InputError");
  return "";
}

}  // namespace shardplan::testing
