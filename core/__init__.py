"""The core: schema, storage, rejects, versions, the reader's helpers; nothing above it."""
