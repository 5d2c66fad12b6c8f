//! Shared plumbing for parameter-server apps.
