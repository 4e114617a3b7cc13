//! The one way sanpolicy reads a file from disk: only a regular file, opened without blocking,
//! and never more than a bound. A FIFO, a socket, a device (`/dev/zero`) or a directory where a
//! policy or Makefile belongs is named for what it is, instead of hanging the run, growing
//! memory without end, or being taken for a missing file.

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// A policy or an included file larger than this is refused: real policies are kilobytes.
pub const POLICY_LIMIT: u64 = 64 << 20;
/// A kbuild file (or a rules file) larger than this is refused when named and skipped by a
/// walk: the largest Makefile in Linux 6.12 is under 100 KiB.
pub const KBUILD_LIMIT: u64 = 16 << 20;
/// Rust sources and manifests of a Cargo workspace.
pub const SOURCE_LIMIT: u64 = 64 << 20;
/// Files of a kernel build directory `derive` reads: archives, objects, gcc's call graphs (the
/// largest object of a 6.12 KASAN build is a few MiB; `vmlinux.o`, never read, is larger).
pub const BUILD_LIMIT: u64 = 512 << 20;

/// Why a file could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// Nothing there (or a directory on the way is not one).
    Missing(io::Error),
    /// Something that is not a regular file: what it is ("a FIFO").
    NotRegular(&'static str),
    /// Larger than `limit` bytes.
    TooLarge { limit: u64 },
    /// Any other failure (permissions, I/O).
    Other(io::Error),
}

impl ReadError {
    pub fn is_missing(&self) -> bool {
        matches!(self, ReadError::Missing(_))
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Missing(e) | ReadError::Other(e) => write!(f, "{e}"),
            ReadError::NotRegular(what) => write!(f, "is {what}, not a regular file"),
            ReadError::TooLarge { limit } => write!(f, "is larger than {} MiB, the most sanpolicy reads", limit >> 20),
        }
    }
}

impl std::error::Error for ReadError {}

impl From<ReadError> for io::Error {
    fn from(e: ReadError) -> io::Error {
        match e {
            ReadError::Missing(e) | ReadError::Other(e) => e,
            other => io::Error::new(io::ErrorKind::InvalidInput, other.to_string()),
        }
    }
}

/// What a file type is, for messages ("is a FIFO, not a regular file").
pub fn describe(t: fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_symlink() {
        "a symlink"
    } else if t.is_file() {
        "a regular file"
    } else {
        "not a file"
    }
}

fn classify(e: io::Error) -> ReadError {
    // ENOTDIR: a file stands where a directory on the way belongs, so nothing is at the path.
    if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) {
        ReadError::Missing(e)
    } else {
        ReadError::Other(e)
    }
}

/// The bytes of the regular file at `path` (symlinks followed), at most `limit` of them.
///
/// The type is checked before opening (so a directory or a FIFO is named, not opened) and again
/// on the open handle (something swapped in after the check is caught); the open never blocks
/// (`O_NONBLOCK`: opening a FIFO for reading would wait for a writer), and at most `limit + 1`
/// bytes are ever read, so a file that grows while being read cannot grow memory.
pub fn read(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let before = fs::metadata(path).map_err(classify)?;
    if !before.is_file() {
        return Err(ReadError::NotRegular(describe(before.file_type())));
    }
    read_listed(path, limit)
}

/// [`read`] for a path a directory listing just gave as a regular file (walkdir's entry type,
/// from `readdir`): the listing is the check before opening, so the path is not stat'ed again
/// (a kernel tree's walk reads 4000 files; the extra `statx` each cost import a tenth of its
/// time). Something swapped in since the listing is still refused on the open handle, and the
/// open never blocks.
pub fn read_listed(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .map_err(classify)?;
    read_open(file, limit)
}

/// [`read_listed`] for the entry `name` of the directory open as `dir`: the name is looked up
/// from that handle, not from the root again (a tree walk opens 3000 files 5 to 8 levels deep).
pub fn read_listed_at(
    dir: rustix::fd::BorrowedFd<'_>,
    name: &std::ffi::CStr,
    limit: u64,
) -> Result<Vec<u8>, ReadError> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| classify(e.into()))?;
    read_open(fs::File::from(fd), limit)
}

/// [`read`] for a file already opened: checked on the handle, read up to the bound.
pub fn read_open(file: fs::File, limit: u64) -> Result<Vec<u8>, ReadError> {
    let meta = file.metadata().map_err(ReadError::Other)?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular(describe(meta.file_type())));
    }
    if meta.len() > limit {
        return Err(ReadError::TooLarge { limit });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1).read_to_end(&mut bytes).map_err(ReadError::Other)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(bytes)
}

/// [`read`] as UTF-8 text; invalid UTF-8 is an [`io::ErrorKind::InvalidData`] error, as with
/// [`fs::read_to_string`].
pub fn read_to_string(path: &Path, limit: u64) -> io::Result<String> {
    let bytes = read(path, limit)?;
    String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_is_named_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from_raw_mode(0o600)).unwrap();
        let e = read(&fifo, 10).unwrap_err();
        assert_eq!(e.to_string(), "is a FIFO, not a regular file");
        // Opened directly (as after a swap), the handle check still refuses it.
        let handle = fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(&fifo)
            .unwrap();
        assert_eq!(read_open(handle, 10).unwrap_err().to_string(), "is a FIFO, not a regular file");
    }

    /// Without the check before opening, the handle's check still names a FIFO (never blocking
    /// on it), a directory or a device, and the bound holds.
    #[test]
    fn a_listed_path_is_checked_on_its_handle() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from_raw_mode(0o600)).unwrap();
        assert_eq!(read_listed(&fifo, 10).unwrap_err().to_string(), "is a FIFO, not a regular file");
        assert_eq!(read_listed(dir.path(), 10).unwrap_err().to_string(), "is a directory, not a regular file");
        assert_eq!(
            read_listed(Path::new("/dev/zero"), 10).unwrap_err().to_string(),
            "is a character device, not a regular file"
        );
        let file = dir.path().join("f");
        fs::write(&file, "0123456789").unwrap();
        assert_eq!(read_listed(&file, 10).unwrap(), b"0123456789");
        assert!(matches!(read_listed(&file, 9), Err(ReadError::TooLarge { limit: 9 })));
        assert!(read_listed(&dir.path().join("none"), 10).unwrap_err().is_missing());
    }

    #[test]
    fn kinds_and_bounds() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path(), 10).unwrap_err().to_string(), "is a directory, not a regular file");
        assert_eq!(
            read(Path::new("/dev/zero"), 10).unwrap_err().to_string(),
            "is a character device, not a regular file"
        );
        assert!(read(&dir.path().join("none"), 10).unwrap_err().is_missing());
        let file = dir.path().join("f");
        fs::write(&file, "0123456789").unwrap();
        assert_eq!(read(&file, 10).unwrap(), b"0123456789");
        assert!(matches!(read(&file, 9), Err(ReadError::TooLarge { limit: 9 })));
        assert!(read(&file.join("under"), 10).unwrap_err().is_missing());
    }
}
