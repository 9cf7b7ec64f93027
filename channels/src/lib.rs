//! mnemo's platform adapters. Each turns one platform's traffic into
//! [`Inbound`] messages and sends [`Outbound`] replies. Knows nothing of
//! memory: no file here reads or writes the sessions folder.
