//! TPM 2.0 client (work in progress).
