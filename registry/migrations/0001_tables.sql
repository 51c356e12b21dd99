-- The metadata store's tables (registry/src/store/tables.rs) in one
-- relation: a row per (table, key), keys compared byte by byte as redb
-- compares them (bytea; keys join their parts with NUL, which text cannot
-- hold), values as the engine-neutral encoding of store::tables::Val.
CREATE TABLE sealvol_tables (
    tbl text NOT NULL,
    k bytea NOT NULL,
    v bytea NOT NULL,
    PRIMARY KEY (tbl, k)
);
