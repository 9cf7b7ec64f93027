//! A key for bytes that is the same in every build and on every platform
//! (FNV-1a), for what is compared with what an earlier run stored: recall's
//! document keys and its query cache, the short tags of versioned files.
//!
//! Pure arithmetic; never a security boundary (anyone can make two inputs
//! collide), only a stable name.

/// FNV-1a over `parts` (with a separator): stable across builds and
/// platforms, unlike `std`'s hasher, since keys are compared with what an
/// earlier run stored.
pub(crate) fn key_of(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.iter().chain(std::iter::once(&0xff)) {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}
