"""The git-native state: issue files on `hive/state`, CAS writes, the SQLite index, the checkout."""
