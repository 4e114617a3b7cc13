//! The initramfs: a `newc` cpio archive (the format the kernel unpacks, `usr/gen_init_cpio`'s),
//! uncompressed. Each entry is a 110-byte ASCII header (`070701`, thirteen 8-digit hex fields),
//! the NUL-terminated name, padding to four bytes, the data, padding to four bytes; the archive
//! ends with the `TRAILER!!!` entry.

/// One entry of the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Dir {
        name: String,
        mode: u32,
    },
    File {
        name: String,
        mode: u32,
        data: Vec<u8>,
    },
    /// A character device node (`/dev/console` is 5:1).
    Char {
        name: String,
        mode: u32,
        major: u32,
        minor: u32,
    },
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFCHR: u32 = 0o020000;

/// The archive of `entries`, in order, then the trailer. Owner root, mtime 0 (reproducible).
pub fn newc(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    for (ino, e) in entries.iter().enumerate() {
        let (name, mode, data, rdev, nlink): (&str, u32, &[u8], (u32, u32), u32) = match e {
            Entry::Dir { name, mode } => (name, S_IFDIR | mode, &[], (0, 0), 2),
            Entry::File { name, mode, data } => (name, S_IFREG | mode, data, (0, 0), 1),
            Entry::Char { name, mode, major, minor } => (name, S_IFCHR | mode, &[], (*major, *minor), 1),
        };
        push(&mut out, ino as u32 + 1, name, mode, nlink, data, rdev);
    }
    push(&mut out, 0, "TRAILER!!!", 0, 1, &[], (0, 0));
    out
}

fn push(out: &mut Vec<u8>, ino: u32, name: &str, mode: u32, nlink: u32, data: &[u8], rdev: (u32, u32)) {
    let fields = [ino, mode, 0, 0, nlink, 0, data.len() as u32, 0, 0, rdev.0, rdev.1, name.len() as u32 + 1, 0];
    out.extend_from_slice(b"070701");
    for f in fields {
        out.extend_from_slice(format!("{f:08X}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad(out);
    out.extend_from_slice(data);
    pad(out);
}

fn pad(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_names_and_padding_are_newc() {
        let a = newc(&[
            Entry::Dir { name: "dev".into(), mode: 0o755 },
            Entry::Char { name: "dev/console".into(), mode: 0o600, major: 5, minor: 1 },
            Entry::File { name: "init".into(), mode: 0o755, data: b"#!x".to_vec() },
        ]);
        // First header: magic, ino 1, a directory 0755, two links, no data, name "dev\0".
        let h = std::str::from_utf8(&a[..110]).unwrap();
        assert_eq!(&h[..6], "070701");
        assert_eq!(&h[6..14], "00000001");
        assert_eq!(&h[14..22], "000041ED");
        assert_eq!(&h[38..46], "00000002");
        assert_eq!(&h[94..102], "00000004");
        assert_eq!(&a[110..114], b"dev\0");
        // 110 + 4 = 114, padded to 116: the next header starts there.
        assert_eq!(&a[116..122], b"070701");
        let console = std::str::from_utf8(&a[116..226]).unwrap();
        assert_eq!(&console[14..22], "00002180");
        assert_eq!((&console[78..86], &console[86..94]), ("00000005", "00000001"));
        // The file's data follows its padded name; the archive ends with the trailer.
        let at = a.windows(4).position(|w| w == b"init").unwrap();
        // "init\0" ends 115 bytes after its header: one byte of padding.
        assert_eq!(&a[at + 6..][..3], b"#!x");
        let trailer = a.windows(10).position(|w| w == b"TRAILER!!!").unwrap();
        assert_eq!(&a[trailer - 110..trailer - 104], b"070701");
        assert_eq!(a.len() % 4, 0);
    }
}
