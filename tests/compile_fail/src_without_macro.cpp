// SPDX-License-Identifier: Apache-2.0
// <gradsync/src.hpp> in a header-only build: it would define gradsync's functions a second time.
#include <gradsync/src.hpp>
