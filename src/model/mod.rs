//! Model backends (being written).
