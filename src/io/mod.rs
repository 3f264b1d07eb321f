//! The I/O layer: the only place `unsafe` lives.
//!
//! - [`mmap`]: read-only mappings of committed file prefixes (offset tables).
//! - [`fs`]: file-system calls with the durability rules of the commit protocol (fsync of
//!   files and directories, atomic replace), each mapping `std::io::Error` into [`crate::Error`]
//!   with the path and operation.

pub mod fs;
pub mod mmap;
