// SPDX-License-Identifier: Apache-2.0
// doctest next to libtorch: c10 logs through glog, whose <glog/logging.h> defines CHECK,
// CHECK_EQ, ... as aborting asserts. Included first, torch's headers are parsed once;
// their CHECK macros are then dropped so that doctest's (which report and go on) win.
#pragma once

#include <torch/torch.h>

#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LE
#undef CHECK_LT
#undef CHECK_GE
#undef CHECK_GT

#include <doctest/doctest.h>
