//! How the S3 gateway's names map onto volumes (SPEC.md §10.1), with no
//! I/O: a bucket is a namespace, and an object key is a *root* naming a
//! volume and one of its versions, then a file's path:
//!
//! - `VOLUME@b3:HEX/PATH`: a version, pinned by its digest;
//! - `VOLUME:TAG/PATH`: the version a tag names when asked;
//! - `VOLUME/PATH`: the head when asked.
//!
//! A bucket's keys are listed in byte order, as S3 lists them, over that
//! whole space: every root of every volume, and under each root its
//! version's files. [`Page`] collects one page of such a listing from the
//! keys it is offered in order, folding keys into common prefixes at the
//! delimiter, and [`Cursor`] is where the next page starts.

use base64::Engine;
use sealvol_spec::reference::VolumeName;
use sealvol_spec::{DigestSelector, Selector};

/// A key that names one file of one version.
#[derive(Debug, PartialEq, Eq)]
pub struct ObjectKey {
    /// The volume's full name, `BUCKET/VOLUME`.
    pub volume: String,
    pub selector: Selector,
    /// The file's path in the version.
    pub path: String,
}

/// The volume of `bucket` that `root` (a key's first component) names,
/// and which of its versions; `None` when it names none.
pub fn parse_root(bucket: &str, root: &str) -> Option<(String, Selector)> {
    let (volume, selector) = if let Some((v, digest)) = root.split_once('@') {
        // A full digest or a prefix of one (SPEC.md §1.3); a prefix names
        // a version only while exactly one alive version has it.
        let d = digest.parse::<DigestSelector>().ok()?;
        if matches!(d, DigestSelector::Sha256(_)) {
            return None;
        }
        (v, Selector::Digest(d))
    } else if let Some((v, tag)) = root.split_once(':') {
        (v, Selector::Tag(tag.parse().ok()?))
    } else {
        (root, Selector::Head)
    };
    Some((volume_name(bucket, volume)?, selector))
}

/// `BUCKET/VOLUME` when it is a volume's name the gateway serves: two
/// components, as a bucket and a key's root hold.
pub fn volume_name(bucket: &str, volume: &str) -> Option<String> {
    let name: VolumeName = format!("{bucket}/{volume}").parse().ok()?;
    (name.as_str().split('/').count() == 2).then(|| name.as_str().to_string())
}

/// What object `key` of `bucket` names; `None` for a key that names no
/// file of any version.
pub fn parse(bucket: &str, key: &str) -> Option<ObjectKey> {
    let (root, path) = key.split_once('/')?;
    if path.is_empty() {
        return None;
    }
    let (volume, selector) = parse_root(bucket, root)?;
    Some(ObjectKey {
        volume,
        selector,
        path: path.to_string(),
    })
}

/// Where a listing resumes: after `after`, and when `under` also past
/// every key that starts with it (a common prefix, or a root already
/// listed whole).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    pub after: String,
    pub under: bool,
}

impl Cursor {
    /// `StartAfter`: keys after `key`.
    pub fn after(key: &str) -> Cursor {
        Cursor {
            after: key.to_string(),
            under: false,
        }
    }

    /// Whether `key` comes after the cursor.
    pub fn passes(&self, key: &str) -> bool {
        key > self.after.as_str() && !(self.under && key.starts_with(&self.after))
    }

    /// Of the cursor and `other`, the one further on.
    pub fn max(self, other: Cursor) -> Cursor {
        if other.after > self.after || (other.after == self.after && other.under) {
            other
        } else {
            self
        }
    }

    /// The continuation token: opaque to clients, and only a position,
    /// so a forged one lists nothing it could not list from the start.
    pub fn token(&self) -> String {
        let flag = if self.under { 'u' } else { 'k' };
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{flag}{}", self.after))
    }

    pub fn from_token(token: &str) -> Option<Cursor> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .ok()?;
        let text = String::from_utf8(bytes).ok()?;
        let under = match text.chars().next()? {
            'u' => true,
            'k' => false,
            _ => return None,
        };
        Some(Cursor {
            after: text[1..].to_string(),
            under,
        })
    }
}

/// How the keys under a root relate to a listing's prefix.
#[derive(Debug, PartialEq, Eq)]
pub enum Under<'a> {
    /// No key under the root starts with the prefix.
    None,
    /// Every key under it folds into this common prefix, so the root's
    /// files need not be read.
    Prefix(&'a str),
    /// Its files whose paths start with this are listed one by one.
    Files(&'a str),
}

/// How the keys under `root` (ending with `/`) fall in a listing of
/// `prefix` split at `delimiter`.
pub fn under<'a>(root: &'a str, prefix: &'a str, delimiter: Option<&str>) -> Under<'a> {
    if let Some(sub) = prefix.strip_prefix(root) {
        return Under::Files(sub);
    }
    if !root.starts_with(prefix) {
        return Under::None;
    }
    match delimiter.filter(|d| !d.is_empty()) {
        Some(d) => match root[prefix.len()..].find(d) {
            Some(i) => Under::Prefix(&root[..prefix.len() + i + d.len()]),
            None => Under::Files(""),
        },
        None => Under::Files(""),
    }
}

/// One entry of a listing page.
#[derive(Debug, PartialEq, Eq)]
pub enum Item<T> {
    Key(String, T),
    Prefix(String),
}

/// A listing page being filled with keys offered in byte order.
pub struct Page<'a, T> {
    prefix: &'a str,
    delimiter: Option<&'a str>,
    cursor: &'a Cursor,
    max: usize,
    pub items: Vec<Item<T>>,
    /// A key or prefix past the page was offered: there is more.
    pub truncated: bool,
    /// Where the next page starts when the page was cut short of full.
    resume: Option<Cursor>,
}

impl<'a, T> Page<'a, T> {
    pub fn new(
        prefix: &'a str,
        delimiter: Option<&'a str>,
        cursor: &'a Cursor,
        max: usize,
    ) -> Self {
        Page {
            prefix,
            delimiter: delimiter.filter(|d| !d.is_empty()),
            cursor,
            max,
            items: Vec::new(),
            truncated: false,
            resume: None,
        }
    }

    /// Ends the page before it is full: the next one starts at `at`,
    /// which lies past every entry of this one.
    pub fn cut(&mut self, at: Cursor) {
        self.truncated = true;
        self.resume = Some(at);
    }

    /// Offers `key`, with what a listing shows of it; `false` once the
    /// page is full and this key starts the next.
    pub fn offer(&mut self, key: &str, meta: impl FnOnce() -> T) -> bool {
        if !key.starts_with(self.prefix) || !self.cursor.passes(key) {
            return true;
        }
        if let Some(d) = self.delimiter {
            if let Some(i) = key[self.prefix.len()..].find(d) {
                return self.offer_prefix(&key[..self.prefix.len() + i + d.len()]);
            }
        }
        if self.items.len() >= self.max {
            self.truncated = true;
            return false;
        }
        self.items.push(Item::Key(key.to_string(), meta()));
        true
    }

    /// Offers a common prefix that at least one listed key folds into.
    pub fn offer_prefix(&mut self, prefix: &str) -> bool {
        if matches!(self.items.last(), Some(Item::Prefix(p)) if p == prefix) {
            return true;
        }
        if self.cursor.under && prefix.starts_with(&self.cursor.after) {
            return true;
        }
        if self.items.len() >= self.max {
            self.truncated = true;
            return false;
        }
        self.items.push(Item::Prefix(prefix.to_string()));
        true
    }

    /// Whether every key under common prefix `prefix` is behind the
    /// cursor, so the prefix is not listed again; `None` when that
    /// depends on which keys there are (the cursor lies inside it).
    pub fn behind(&self, prefix: &str) -> Option<bool> {
        let after = self.cursor.after.as_str();
        if self.cursor.under && prefix.starts_with(after) {
            return Some(true);
        }
        if after.starts_with(prefix) {
            // The cursor is inside: only keys past it count.
            return if self.cursor.under && after == prefix {
                Some(true)
            } else {
                None
            };
        }
        Some(after > prefix)
    }

    /// Where the next page starts: after the last entry of this one.
    pub fn next(&self) -> Option<Cursor> {
        if !self.truncated {
            return None;
        }
        if let Some(at) = &self.resume {
            return Some(at.clone());
        }
        Some(match self.items.last() {
            Some(Item::Key(k, _)) => Cursor::after(k),
            Some(Item::Prefix(p)) => Cursor {
                after: p.clone(),
                under: true,
            },
            None => self.cursor.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "b3:9f3c000000000000000000000000000000000000000000000000000000000000";

    #[test]
    fn keys_name_a_volume_a_version_and_a_path() {
        let k = parse("weights", &format!("qwen@{D}/sub/model.safetensors")).unwrap();
        assert_eq!(k.volume, "weights/qwen");
        assert_eq!(k.selector, Selector::Digest(D.parse().unwrap()));
        assert_eq!(k.path, "sub/model.safetensors");
        let k = parse("weights", "qwen:prod/config.json").unwrap();
        assert_eq!(k.selector, Selector::Tag("prod".parse().unwrap()));
        let k = parse("weights", "qwen/config.json").unwrap();
        assert_eq!(
            (k.volume.as_str(), k.selector),
            ("weights/qwen", Selector::Head)
        );
        // No path, no volume, a bad tag or digest, a manifest digest, a
        // bucket that is no namespace: no file.
        for bad in [
            "qwen/",
            "qwen",
            "/config.json",
            "qwen:/x",
            "qwen:a b/x",
            "qwen@b3:zz/x",
            "qwen@sha256:0000000000000000000000000000000000000000000000000000000000000000/x",
            "Qwen/x",
        ] {
            assert_eq!(parse("weights", bad), None, "{bad}");
        }
        assert_eq!(parse("a/b", "qwen/x"), None);
        assert_eq!(parse("", "qwen/x"), None);
    }

    #[test]
    fn roots_fold_at_the_delimiter_or_list_their_files() {
        let root = format!("qwen@{D}/");
        assert_eq!(under(&root, "", Some("/")), Under::Prefix(&root));
        assert_eq!(under(&root, "qw", Some("/")), Under::Prefix(&root));
        assert_eq!(under(&root, "qwen@", Some(":")), Under::Prefix("qwen@b3:"));
        assert_eq!(under(&root, "", None), Under::Files(""));
        assert_eq!(
            under(&root, &format!("{root}sub/"), Some("/")),
            Under::Files("sub/")
        );
        assert_eq!(under(&root, "other", Some("/")), Under::None);
        assert_eq!(under("qwen/", "qwen:", Some("/")), Under::None);
    }

    fn fill<'a>(
        keys: &[&str],
        prefix: &'a str,
        delimiter: Option<&'a str>,
        cursor: &'a Cursor,
        max: usize,
    ) -> Page<'a, ()> {
        let mut page = Page::new(prefix, delimiter, cursor, max);
        for k in keys {
            if !page.offer(k, || ()) {
                break;
            }
        }
        page
    }

    fn names(page: &Page<'_, ()>) -> Vec<String> {
        page.items
            .iter()
            .map(|i| match i {
                Item::Key(k, _) => k.clone(),
                Item::Prefix(p) => format!("{p}*"),
            })
            .collect()
    }

    #[test]
    fn pages_fold_prefixes_and_resume_where_they_stopped() {
        let keys = ["a/1", "a/2", "a/x/1", "a/x/2", "a/y", "b/1", "c"];
        let start = Cursor::default();
        let page = fill(&keys, "", Some("/"), &start, 10);
        assert_eq!(names(&page), ["a/*", "b/*", "c"]);
        assert!(!page.truncated);
        let page = fill(&keys, "a/", Some("/"), &start, 10);
        assert_eq!(names(&page), ["a/1", "a/2", "a/x/*", "a/y"]);
        // Pages of two, every key once, in order, with and without a
        // delimiter.
        for (prefix, delimiter, want) in [
            ("a/", Some("/"), vec!["a/1", "a/2", "a/x/*", "a/y"]),
            ("", None, keys.to_vec()),
            ("", Some("/"), vec!["a/*", "b/*", "c"]),
        ] {
            let mut cursor = Cursor::default();
            let mut seen = Vec::new();
            loop {
                let page = fill(&keys, prefix, delimiter, &cursor, 2);
                seen.extend(names(&page));
                match page.next() {
                    Some(next) => {
                        // Through the token, as a client sends it back.
                        cursor = Cursor::from_token(&next.token()).unwrap();
                    }
                    None => break,
                }
            }
            assert_eq!(seen, want, "{prefix:?} {delimiter:?}");
        }
        // StartAfter inside a common prefix still lists it once.
        let after = Cursor::after("a/1");
        let page = fill(&keys, "", Some("/"), &after, 10);
        assert_eq!(names(&page), ["a/*", "b/*", "c"]);
        assert!(Cursor::from_token("not base64!").is_none());
        assert!(Cursor::from_token("").is_none());
    }

    #[test]
    fn a_prefix_is_behind_the_cursor_only_when_all_its_keys_are() {
        let page = |c: &Cursor| -> Option<bool> {
            let p: Page<'_, ()> = Page::new("", Some("/"), c, 10);
            p.behind("qwen/")
        };
        assert_eq!(page(&Cursor::default()), Some(false));
        assert_eq!(page(&Cursor::after("a")), Some(false));
        assert_eq!(page(&Cursor::after("qwen0")), Some(true));
        assert_eq!(page(&Cursor::after("qwen/zz")), None);
        let under = |s: &str| Cursor {
            after: s.into(),
            under: true,
        };
        assert_eq!(page(&under("qwen/")), Some(true));
        assert_eq!(page(&under("qw")), Some(true));
        assert_eq!(page(&under("qwen/a/")), None);
    }

    #[test]
    fn cursors_take_the_further_one() {
        let a = Cursor::after("a");
        let b = Cursor::after("b");
        assert_eq!(a.clone().max(b.clone()), b);
        assert_eq!(b.clone().max(a), b);
        let bu = Cursor {
            after: "b".into(),
            under: true,
        };
        assert_eq!(b.max(bu.clone()), bu);
    }
}
