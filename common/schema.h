#pragma once

#include <vector>

#include "common/database.h"

namespace calleval {

// The database schema of every store, as ordered migrations (PRAGMA user_version). A new
// migration is appended; an applied one is never edited.
const std::vector<db::Migration>& SchemaMigrations();

}  // namespace calleval
