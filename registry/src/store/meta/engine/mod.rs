//! The metadata store's engine: named tables of text keys in byte order,
//! read and written in transactions, the shape of redb's API (which the
//! metadata code was written against) over any engine that has it.
//!
//! The metadata code (every file of `store::meta` beside this folder) is
//! written once against these types; the engine underneath is redb, the
//! embedded default. A shared engine (PostgreSQL, for registry replicas)
//! implements the same four operations (get, insert, remove, ordered
//! range) in its own transactions, as zot's metadata drivers do over
//! BoltDB, DynamoDB and Redis.
//!
//! Values are numbers ([`U64`]), text ([`Str`]) or bytes ([`Bytes`]); a
//! read hands back a [`Guard`] whose `value()` borrows them, as redb's
//! `AccessGuard` does, so the code reads the same on every engine.

pub mod error;
pub mod postgres;

use std::borrow::Borrow;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

pub use error::{Result, TableError};
use postgres::{Pg, PgTx};

/// What a table's values are.
pub trait Val: 'static {
    /// redb's type for them.
    type R: redb::Value + 'static;
    /// What a read holds.
    type Owned;
    /// What `Guard::value` lends.
    type View<'a>;
    /// What `insert` takes.
    type In<'a>;
    fn own(v: <Self::R as redb::Value>::SelfType<'_>) -> Self::Owned;
    fn view(o: &Self::Owned) -> Self::View<'_>;
    fn to_redb<'a>(v: Self::In<'a>) -> <Self::R as redb::Value>::SelfType<'a>;
    /// A value read, as `insert` takes it (to copy rows).
    fn again<'a>(v: Self::View<'a>) -> Self::In<'a>;
    /// The bytes another engine stores (numbers big-endian).
    fn encode(v: Self::In<'_>) -> Vec<u8>;
    fn decode(b: Vec<u8>) -> Result<Self::Owned>;
}

/// Numbers.
pub struct U64;
/// UTF-8 text.
pub struct Str;
/// Bytes.
pub struct Bytes;

impl Val for U64 {
    type R = u64;
    type Owned = u64;
    type View<'a> = u64;
    type In<'a> = u64;
    fn again<'a>(v: Self::View<'a>) -> Self::In<'a> {
        v
    }
    fn encode(v: u64) -> Vec<u8> {
        v.to_be_bytes().to_vec()
    }
    fn decode(b: Vec<u8>) -> Result<u64> {
        let b: [u8; 8] = b
            .try_into()
            .map_err(|_| TableError("a stored number is not 8 bytes".into()))?;
        Ok(u64::from_be_bytes(b))
    }
    fn own(v: u64) -> u64 {
        v
    }
    fn view(o: &u64) -> u64 {
        *o
    }
    fn to_redb<'a>(v: Self::In<'a>) -> <Self::R as redb::Value>::SelfType<'a> {
        v
    }
}

impl Val for Str {
    type R = &'static str;
    type Owned = String;
    type View<'a> = &'a str;
    type In<'a> = &'a str;
    fn again<'a>(v: Self::View<'a>) -> Self::In<'a> {
        v
    }
    fn encode(v: &str) -> Vec<u8> {
        v.as_bytes().to_vec()
    }
    fn decode(b: Vec<u8>) -> Result<String> {
        String::from_utf8(b).map_err(|_| TableError("stored text is not UTF-8".into()))
    }
    fn own(v: &str) -> String {
        v.to_string()
    }
    fn view(o: &String) -> &str {
        o
    }
    fn to_redb<'a>(v: Self::In<'a>) -> <Self::R as redb::Value>::SelfType<'a> {
        v
    }
}

impl Val for Bytes {
    type R = &'static [u8];
    type Owned = Vec<u8>;
    type View<'a> = &'a [u8];
    type In<'a> = &'a [u8];
    fn again<'a>(v: Self::View<'a>) -> Self::In<'a> {
        v
    }
    fn encode(v: &[u8]) -> Vec<u8> {
        v.to_vec()
    }
    fn decode(b: Vec<u8>) -> Result<Vec<u8>> {
        Ok(b)
    }
    fn own(v: &[u8]) -> Vec<u8> {
        v.to_vec()
    }
    fn view(o: &Vec<u8>) -> &[u8] {
        o
    }
    fn to_redb<'a>(v: Self::In<'a>) -> <Self::R as redb::Value>::SelfType<'a> {
        v
    }
}

/// A table: its name and the kind of its values; keys are text.
pub struct TableDefinition<V: Val> {
    name: &'static str,
    _values: PhantomData<V>,
}

impl<V: Val> Clone for TableDefinition<V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<V: Val> Copy for TableDefinition<V> {}

impl<V: Val> TableDefinition<V> {
    pub const fn new(name: &'static str) -> TableDefinition<V> {
        TableDefinition {
            name,
            _values: PhantomData,
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    fn redb(&self) -> redb::TableDefinition<'static, &'static str, V::R> {
        redb::TableDefinition::new(self.name)
    }
}

/// A value read from a table.
pub struct Guard<V: Val>(V::Owned);

impl<V: Val> Guard<V> {
    pub fn value(&self) -> V::View<'_> {
        V::view(&self.0)
    }
}

/// One row of a range: its key and value.
pub type Row<V> = (Guard<Str>, Guard<V>);
/// The rows of a range, in key order.
pub type Rows<'t, V> = Box<dyn Iterator<Item = Result<Row<V>>> + 't>;

/// The metadata database.
pub enum Database {
    Redb(redb::Database),
    Postgres(Pg),
}

impl Database {
    pub fn begin_write(&self) -> Result<WriteTransaction> {
        Ok(match self {
            Database::Redb(db) => WriteTransaction::Redb(Box::new(db.begin_write()?)),
            Database::Postgres(pg) => WriteTransaction::Postgres(Box::new(pg.begin_write()?)),
        })
    }

    pub fn begin_read(&self) -> Result<ReadTransaction> {
        use redb::ReadableDatabase as _;
        Ok(match self {
            Database::Redb(db) => ReadTransaction::Redb(Box::new(db.begin_read()?)),
            Database::Postgres(pg) => ReadTransaction::Postgres(Box::new(pg.begin_read()?)),
        })
    }
}

/// A transaction that writes: everything in it happens, or nothing.
pub enum WriteTransaction {
    Redb(Box<redb::WriteTransaction>),
    Postgres(Box<PgTx>),
}

impl WriteTransaction {
    pub fn open_table<V: Val>(&self, def: TableDefinition<V>) -> Result<Table<'_, V>> {
        Ok(match self {
            WriteTransaction::Redb(tx) => Table::Redb(tx.open_table(def.redb())?),
            WriteTransaction::Postgres(tx) => Table::Postgres(tx, def),
        })
    }

    pub fn commit(self) -> Result<()> {
        match self {
            WriteTransaction::Redb(tx) => Ok(tx.commit()?),
            WriteTransaction::Postgres(tx) => (*tx).commit(),
        }
    }

    /// The redb transaction, for what only that engine has.
    pub fn as_redb(&self) -> Option<&redb::WriteTransaction> {
        match self {
            WriteTransaction::Redb(tx) => Some(tx),
            WriteTransaction::Postgres(_) => None,
        }
    }
}

/// A transaction that reads one consistent snapshot.
pub enum ReadTransaction {
    Redb(Box<redb::ReadTransaction>),
    Postgres(Box<PgTx>),
}

impl ReadTransaction {
    pub fn open_table<V: Val>(&self, def: TableDefinition<V>) -> Result<ReadOnlyTable<'_, V>> {
        Ok(match self {
            ReadTransaction::Redb(tx) => match tx.open_table(def.redb()) {
                Ok(t) => ReadOnlyTable::Redb(Some(t)),
                // A table nobody wrote yet reads as empty.
                Err(redb::TableError::TableDoesNotExist(_)) => ReadOnlyTable::Redb(None),
                Err(e) => return Err(e.into()),
            },
            ReadTransaction::Postgres(tx) => ReadOnlyTable::Postgres(tx, def),
        })
    }
}

/// A table opened for writing.
pub enum Table<'t, V: Val> {
    Redb(redb::Table<'t, &'static str, V::R>),
    Postgres(&'t PgTx, TableDefinition<V>),
}

/// A table opened for reading.
pub enum ReadOnlyTable<'t, V: Val> {
    Redb(Option<redb::ReadOnlyTable<&'static str, V::R>>),
    Postgres(&'t PgTx, TableDefinition<V>),
}

/// A key range as another engine takes it.
fn key_bounds<'a, KR: Borrow<&'a str> + 'a>(
    range: &impl RangeBounds<KR>,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let b = |bound: Bound<&KR>| match bound {
        Bound::Included(k) => Bound::Included(k.borrow().as_bytes().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.borrow().as_bytes().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    };
    (b(range.start_bound()), b(range.end_bound()))
}

fn as_slice(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Rows another engine returned, decoded.
fn decoded<'t, V: Val>(rows: Vec<(Vec<u8>, Vec<u8>)>) -> Rows<'t, V> {
    Box::new(rows.into_iter().map(|(k, v)| {
        let k = String::from_utf8(k).map_err(|_| TableError("a stored key is not UTF-8".into()))?;
        Ok((Guard(k), Guard(V::decode(v)?)))
    }))
}

fn pg_get<V: Val>(tx: &PgTx, def: &TableDefinition<V>, key: &str) -> Result<Option<Guard<V>>> {
    tx.get(def.name, key.as_bytes())?
        .map(|v| V::decode(v).map(Guard))
        .transpose()
}

fn rows<'t, V: Val, I, G, H>(it: I) -> Rows<'t, V>
where
    I: Iterator<Item = std::result::Result<(G, H), redb::StorageError>> + 't,
    G: Borrow<redb::AccessGuard<'t, &'static str>>,
    H: Borrow<redb::AccessGuard<'t, V::R>>,
{
    Box::new(it.map(|r| {
        let (k, v) = r?;
        Ok((
            Guard(k.borrow().value().to_string()),
            Guard(V::own(v.borrow().value())),
        ))
    }))
}

impl<V: Val> Table<'_, V> {
    pub fn get(&self, key: &str) -> Result<Option<Guard<V>>> {
        use redb::ReadableTable as _;
        match self {
            Table::Redb(t) => Ok(t.get(key)?.map(|g| Guard(V::own(g.value())))),
            Table::Postgres(tx, def) => pg_get(tx, def, key),
        }
    }

    /// Stores `value` under `key`; the value it replaced, if any.
    pub fn insert<'v>(&mut self, key: &str, value: V::In<'v>) -> Result<Option<Guard<V>>> {
        match self {
            Table::Redb(t) => Ok(t
                .insert(key, V::to_redb(value))?
                .map(|g| Guard(V::own(g.value())))),
            Table::Postgres(tx, def) => tx
                .put(def.name, key.as_bytes(), &V::encode(value))?
                .map(|v| V::decode(v).map(Guard))
                .transpose(),
        }
    }

    /// Stores every `(key, value)` of `rows`, replacing what was there: on
    /// a shared engine in a few statements, not one round trip a row.
    pub fn insert_many<'v>(&mut self, rows: Vec<(String, V::In<'v>)>) -> Result<()> {
        match self {
            Table::Redb(t) => {
                for (k, v) in rows {
                    t.insert(k.as_str(), V::to_redb(v))?;
                }
                Ok(())
            }
            Table::Postgres(tx, def) => {
                let rows: Vec<(Vec<u8>, Vec<u8>)> = rows
                    .into_iter()
                    .map(|(k, v)| (k.into_bytes(), V::encode(v)))
                    .collect();
                tx.put_many(def.name, &rows)
            }
        }
    }

    /// Removes every key of `keys` that is there.
    pub fn remove_many(&mut self, keys: &[String]) -> Result<()> {
        match self {
            Table::Redb(t) => {
                for k in keys {
                    t.remove(k.as_str())?;
                }
                Ok(())
            }
            Table::Postgres(tx, def) => {
                let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
                tx.delete_many(def.name, &keys)
            }
        }
    }

    /// Removes `key`; the value it had, if any.
    pub fn remove(&mut self, key: &str) -> Result<Option<Guard<V>>> {
        match self {
            Table::Redb(t) => Ok(t.remove(key)?.map(|g| Guard(V::own(g.value())))),
            Table::Postgres(tx, def) => tx
                .delete(def.name, key.as_bytes())?
                .map(|v| V::decode(v).map(Guard))
                .transpose(),
        }
    }

    pub fn range<'a, KR>(&self, range: impl RangeBounds<KR> + 'a) -> Result<Rows<'_, V>>
    where
        KR: Borrow<&'a str> + 'a,
    {
        use redb::ReadableTable as _;
        match self {
            Table::Redb(t) => Ok(rows::<V, _, _, _>(t.range(range)?)),
            Table::Postgres(tx, def) => {
                let (lo, hi) = key_bounds(&range);
                Ok(decoded(tx.range(def.name, as_slice(&lo), as_slice(&hi))?))
            }
        }
    }

    /// Removes every row with a key in `lo..hi`.
    pub fn remove_range(&mut self, lo: &str, hi: &str) -> Result<()> {
        match self {
            Table::Redb(t) => Ok(t.retain_in(lo..hi, |_, _| false)?),
            Table::Postgres(tx, def) => tx.delete_range(
                def.name,
                Bound::Included(lo.as_bytes()),
                Bound::Excluded(hi.as_bytes()),
            ),
        }
    }

    pub fn iter(&self) -> Result<Rows<'_, V>> {
        self.range::<&str>(..)
    }

    pub fn len(&self) -> Result<u64> {
        use redb::ReadableTableMetadata as _;
        match self {
            Table::Redb(t) => Ok(t.len()?),
            Table::Postgres(tx, def) => tx.count(def.name),
        }
    }

    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
}

impl<V: Val> ReadOnlyTable<'_, V> {
    pub fn get(&self, key: &str) -> Result<Option<Guard<V>>> {
        match self {
            ReadOnlyTable::Redb(None) => Ok(None),
            ReadOnlyTable::Redb(Some(t)) => Ok(t.get(key)?.map(|g| Guard(V::own(g.value())))),
            ReadOnlyTable::Postgres(tx, def) => pg_get(tx, def, key),
        }
    }

    pub fn range<'a, KR>(&self, range: impl RangeBounds<KR> + 'a) -> Result<Rows<'_, V>>
    where
        KR: Borrow<&'a str> + 'a,
    {
        match self {
            ReadOnlyTable::Redb(None) => Ok(Box::new(std::iter::empty())),
            ReadOnlyTable::Redb(Some(t)) => Ok(rows::<V, _, _, _>(t.range(range)?)),
            ReadOnlyTable::Postgres(tx, def) => {
                let (lo, hi) = key_bounds(&range);
                Ok(decoded(tx.range(def.name, as_slice(&lo), as_slice(&hi))?))
            }
        }
    }

    pub fn iter(&self) -> Result<Rows<'_, V>> {
        self.range::<&str>(..)
    }

    pub fn len(&self) -> Result<u64> {
        use redb::ReadableTableMetadata as _;
        match self {
            ReadOnlyTable::Redb(None) => Ok(0),
            ReadOnlyTable::Redb(Some(t)) => Ok(t.len()?),
            ReadOnlyTable::Postgres(tx, def) => tx.count(def.name),
        }
    }

    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
}

/// Reading a table opened either way, for helpers that serve both.
pub trait ReadableTable<V: Val> {
    fn get(&self, key: &str) -> Result<Option<Guard<V>>>;
    fn iter(&self) -> Result<Rows<'_, V>>;
}

impl<V: Val> ReadableTable<V> for Table<'_, V> {
    fn get(&self, key: &str) -> Result<Option<Guard<V>>> {
        Table::get(self, key)
    }
    fn iter(&self) -> Result<Rows<'_, V>> {
        Table::iter(self)
    }
}

impl<V: Val> ReadableTable<V> for ReadOnlyTable<'_, V> {
    fn get(&self, key: &str) -> Result<Option<Guard<V>>> {
        ReadOnlyTable::get(self, key)
    }
    fn iter(&self) -> Result<Rows<'_, V>> {
        ReadOnlyTable::iter(self)
    }
}

/// Copies every row of `def` from `src` into `dst` (rows with the same key
/// are replaced); how many.
pub fn copy_rows<V: Val>(
    src: &ReadTransaction,
    dst: &WriteTransaction,
    def: TableDefinition<V>,
) -> Result<u64> {
    let from = src.open_table(def)?;
    let mut to = dst.open_table(def)?;
    let mut n = 0;
    for row in from.iter()? {
        let (k, v) = row?;
        to.insert(k.value(), V::again(v.value()))?;
        n += 1;
    }
    Ok(n)
}
