//! PostgreSQL as the engine under `store::meta`, so that registry
//! replicas share one metadata store.
//!
//! Every table is rows of one relation, `sealvol_tables (tbl, k, v)`
//! (`registry/migrations`, applied at start under an advisory lock). A
//! write transaction takes a transaction-scoped advisory lock first, so
//! writers run one at a time across every replica, as redb's writers do
//! in one process: each operation keeps the guarantees it had on redb
//! (it sees the latest commit, and nothing commits under it), at READ
//! COMMITTED, with no serialization failures to retry. A read transaction
//! reads one snapshot (REPEATABLE READ, READ ONLY). Metadata writes are
//! small and short (a few round trips each), so one writer at a time is
//! not what limits a registry; blob bytes never pass through here.

use std::cell::RefCell;
use std::ops::Bound;
use std::time::Duration;

use postgres::types::ToSql;
use postgres::NoTls;
use r2d2_postgres::PostgresConnectionManager;

use super::error::{Result, TableError};

type Manager = PostgresConnectionManager<NoTls>;
type Conn = r2d2::PooledConnection<Manager>;

/// Migrations in order; each runs once, in its own transaction.
const MIGRATIONS: &[(i32, &str)] = &[(1, include_str!("../../../../migrations/0001_tables.sql"))];

/// The advisory lock every write transaction holds ("sealvol" + 1).
const WRITERS: i64 = 0x7365_616c_766f_6c01;
/// The advisory lock migrations hold ("sealvol" + 2).
const MIGRATING: i64 = 0x7365_616c_766f_6c02;

fn failed(e: impl std::fmt::Display) -> TableError {
    TableError(format!("postgres: {e}"))
}

/// Runs blocking database work where it may block: the `postgres` client
/// drives its own runtime, which must not run on a thread that drives
/// async tasks.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// A pool of connections to the metadata database.
pub struct Pg {
    /// Always `Some` but in `drop`.
    pool: Option<r2d2::Pool<Manager>>,
}

impl Drop for Pg {
    fn drop(&mut self) {
        // Closing a connection blocks on the client's own runtime.
        let pool = self.pool.take();
        blocking(move || drop(pool));
    }
}

impl Pg {
    /// Connects to `url` (`postgres://USER@HOST:PORT/DB`), with `password`
    /// when given (kept out of the URL, so it is never printed), and
    /// applies the migrations this release has.
    pub fn connect(url: &str, password: Option<&str>) -> Result<Pg> {
        blocking(|| {
            let mut config: postgres::Config = url
                .parse()
                .map_err(|e| TableError(format!("[metadata] url: {e}")))?;
            if let Some(p) = password {
                config.password(p);
            }
            config.connect_timeout(Duration::from_secs(10));
            config.application_name("sealvol");
            let pool = r2d2::Pool::builder()
                .max_size(16)
                .connection_timeout(Duration::from_secs(15))
                .build(PostgresConnectionManager::new(config, NoTls))
                .map_err(failed)?;
            let mut conn = pool.get().map_err(failed)?;
            migrate(&mut conn)?;
            drop(conn);
            Ok::<Pg, TableError>(Pg { pool: Some(pool) })
        })
    }

    fn pool(&self) -> &r2d2::Pool<Manager> {
        self.pool.as_ref().expect("the pool lives until drop")
    }

    pub fn begin_write(&self) -> Result<PgTx> {
        PgTx::begin(
            self.pool(),
            &format!(
                "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock({WRITERS})"
            ),
        )
    }

    pub fn begin_read(&self) -> Result<PgTx> {
        PgTx::begin(
            self.pool(),
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        )
    }
}

fn migrate(c: &mut postgres::Client) -> Result<()> {
    c.batch_execute(&format!(
        "SELECT pg_advisory_lock({MIGRATING}); \
         CREATE TABLE IF NOT EXISTS sealvol_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
    ))
    .map_err(failed)?;
    let result = (|| {
        for (version, sql) in MIGRATIONS {
            let done = c
                .query_opt(
                    "SELECT 1 FROM sealvol_schema WHERE version = $1",
                    &[version],
                )
                .map_err(failed)?
                .is_some();
            if done {
                continue;
            }
            let mut tx = c.transaction().map_err(failed)?;
            tx.batch_execute(sql).map_err(failed)?;
            tx.execute(
                "INSERT INTO sealvol_schema (version) VALUES ($1)",
                &[version],
            )
            .map_err(failed)?;
            tx.commit().map_err(failed)?;
            tracing::info!(version, "applied a metadata migration");
        }
        Ok(())
    })();
    c.batch_execute(&format!("SELECT pg_advisory_unlock({MIGRATING})"))
        .map_err(failed)?;
    result
}

/// An open transaction on one pooled connection; rolled back if dropped
/// without [`PgTx::commit`].
pub struct PgTx {
    /// Always `Some` but in `drop`.
    conn: RefCell<Option<Conn>>,
    open: bool,
}

type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// Rows per statement of `put_many` and `delete_many`: large enough that
/// a version of a million chunks takes a few hundred round trips, small
/// enough to stay far below PostgreSQL's parameter and message limits.
const MANY: usize = 5_000;

impl PgTx {
    fn begin(pool: &r2d2::Pool<Manager>, sql: &str) -> Result<PgTx> {
        blocking(|| {
            let mut conn = pool.get().map_err(failed)?;
            conn.batch_execute(sql).map_err(failed)?;
            Ok(PgTx {
                conn: RefCell::new(Some(conn)),
                open: true,
            })
        })
    }

    fn with<T>(&self, f: impl FnOnce(&mut Conn) -> T) -> T {
        let mut conn = self.conn.borrow_mut();
        blocking(|| f(conn.as_mut().expect("the connection lives until drop")))
    }

    pub fn commit(mut self) -> Result<()> {
        self.open = false;
        self.with(|c| c.batch_execute("COMMIT").map_err(failed))
    }

    fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<postgres::Row>> {
        self.with(|c| c.query(sql, params).map_err(failed))
    }

    pub fn get(&self, tbl: &str, k: &[u8]) -> Result<Option<Vec<u8>>> {
        let rows = self.query(
            "SELECT v FROM sealvol_tables WHERE tbl = $1 AND k = $2",
            &[&tbl, &k],
        )?;
        Ok(rows.first().map(|r| r.get(0)))
    }

    /// Stores `v`; the value it replaced, if any.
    pub fn put(&self, tbl: &str, k: &[u8], v: &[u8]) -> Result<Option<Vec<u8>>> {
        let rows = self.query(
            "WITH old AS (SELECT v FROM sealvol_tables WHERE tbl = $1 AND k = $2), \
                  up AS (INSERT INTO sealvol_tables (tbl, k, v) VALUES ($1, $2, $3) \
                         ON CONFLICT (tbl, k) DO UPDATE SET v = EXCLUDED.v) \
             SELECT v FROM old",
            &[&tbl, &k, &v],
        )?;
        Ok(rows.first().map(|r| r.get(0)))
    }

    /// Stores every row of `rows`, a few thousand per statement.
    pub fn put_many(&self, tbl: &str, rows: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        for batch in rows.chunks(MANY) {
            let (ks, vs): (Vec<&[u8]>, Vec<&[u8]>) =
                batch.iter().map(|(k, v)| (&k[..], &v[..])).unzip();
            self.query(
                "INSERT INTO sealvol_tables (tbl, k, v) \
                 SELECT $1, k, v FROM unnest($2::bytea[], $3::bytea[]) AS r(k, v) \
                 ON CONFLICT (tbl, k) DO UPDATE SET v = EXCLUDED.v",
                &[&tbl, &ks, &vs],
            )?;
        }
        Ok(())
    }

    /// Removes every key of `keys` that is there, a few thousand per
    /// statement.
    pub fn delete_many(&self, tbl: &str, keys: &[&[u8]]) -> Result<()> {
        for batch in keys.chunks(MANY) {
            self.query(
                "DELETE FROM sealvol_tables WHERE tbl = $1 AND k = ANY($2::bytea[])",
                &[&tbl, &batch],
            )?;
        }
        Ok(())
    }

    pub fn delete(&self, tbl: &str, k: &[u8]) -> Result<Option<Vec<u8>>> {
        let rows = self.query(
            "DELETE FROM sealvol_tables WHERE tbl = $1 AND k = $2 RETURNING v",
            &[&tbl, &k],
        )?;
        Ok(rows.first().map(|r| r.get(0)))
    }

    /// The rows of `tbl` with keys within the bounds, in key order.
    pub fn range(&self, tbl: &str, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> Result<Rows> {
        let (cond, params) = bounds(&tbl, &lo, &hi);
        let rows = self.query(
            &format!("SELECT k, v FROM sealvol_tables WHERE {cond} ORDER BY k"),
            &params,
        )?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    pub fn delete_range(&self, tbl: &str, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> Result<()> {
        let (cond, params) = bounds(&tbl, &lo, &hi);
        self.query(&format!("DELETE FROM sealvol_tables WHERE {cond}"), &params)?;
        Ok(())
    }

    pub fn count(&self, tbl: &str) -> Result<u64> {
        let rows = self.query(
            "SELECT count(*) FROM sealvol_tables WHERE tbl = $1",
            &[&tbl],
        )?;
        let n: i64 = rows.first().map_or(0, |r| r.get(0));
        Ok(u64::try_from(n).unwrap_or(0))
    }
}

/// The `WHERE` condition of a key range of `tbl`, and its parameters.
fn bounds<'a>(
    tbl: &'a &'a str,
    lo: &'a Bound<&'a [u8]>,
    hi: &'a Bound<&'a [u8]>,
) -> (String, Vec<&'a (dyn ToSql + Sync)>) {
    let mut cond = "tbl = $1".to_string();
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![tbl];
    for (bound, incl, excl) in [(lo, ">=", ">"), (hi, "<=", "<")] {
        let (op, k) = match bound {
            Bound::Included(k) => (incl, k),
            Bound::Excluded(k) => (excl, k),
            Bound::Unbounded => continue,
        };
        params.push(k);
        cond.push_str(&format!(" AND k {op} ${}", params.len()));
    }
    (cond, params)
}

impl Drop for PgTx {
    fn drop(&mut self) {
        let open = self.open;
        let conn = self.conn.get_mut().take();
        blocking(move || {
            if let (true, Some(mut c)) = (open, conn) {
                // Also releases the writers' lock.
                let _ = c.batch_execute("ROLLBACK");
            }
        });
    }
}
