//! From sqlx errors to port errors, by what the caller can do next.

use sqlx::error::{DatabaseError, ErrorKind};
use sqlx::postgres::PgDatabaseError;
use sqlx::sqlite::SqliteError;
use trawl_core::ports::PortError;

/// SQLite primary result codes that mean the file itself cannot be read.
const SQLITE_CORRUPT: i64 = 11;
const SQLITE_NOTADB: i64 = 26;

/// Maps a sqlx error:
///
/// - decode failures, a damaged file or page, and data the database refuses as
///   malformed (Postgres class 22: an invalid JSON text, a value out of range) are
///   [`PortError::Corrupt`];
/// - a missing referenced row (foreign key) is [`PortError::NotFound`];
/// - a unique key already taken (a job id, an idempotency key) is
///   [`PortError::Conflict`];
/// - any other constraint violation is [`PortError::Corrupt`]: the input contradicts
///   what is stored, and trying again cannot help;
/// - everything else (I/O, a refused or lost connection, a busy database, a
///   deadlock, a closed or exhausted pool) is [`PortError::Unavailable`]: the caller
///   may try again.
pub(crate) fn port_error(e: sqlx::Error) -> PortError {
    match &e {
        sqlx::Error::Decode(_)
        | sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::TypeNotFound { .. }
        | sqlx::Error::RowNotFound
        | sqlx::Error::Encode(_) => PortError::Corrupt(e.to_string()),
        sqlx::Error::Database(db) => match db.kind() {
            ErrorKind::ForeignKeyViolation => PortError::NotFound(e.to_string()),
            ErrorKind::UniqueViolation => PortError::Conflict(e.to_string()),
            ErrorKind::NotNullViolation
            | ErrorKind::CheckViolation
            | ErrorKind::ExclusionViolation => PortError::Corrupt(e.to_string()),
            _ if is_damage(db.as_ref()) => PortError::Corrupt(e.to_string()),
            _ => PortError::Unavailable(e.to_string()),
        },
        _ => PortError::Unavailable(e.to_string()),
    }
}

/// Whether a database error says the data is damaged or malformed, as opposed to
/// the database being unable to answer right now.
fn is_damage(db: &dyn DatabaseError) -> bool {
    if let Some(e) = db.try_downcast_ref::<SqliteError>() {
        let primary = e
            .code()
            .and_then(|c| c.parse::<i64>().ok())
            .map(|c| c & 0xff);
        return matches!(primary, Some(SQLITE_CORRUPT | SQLITE_NOTADB));
    }
    if let Some(e) = db.try_downcast_ref::<PgDatabaseError>() {
        // SQLSTATE class 22 is a data exception; XX001 and XX002 are a damaged
        // table or index.
        let code = e.code();
        return code.starts_with("22") || code == "XX001" || code == "XX002";
    }
    false
}

/// `.map_err(port_error)` as a method.
pub(crate) trait ResultExt<T> {
    fn port(self) -> Result<T, PortError>;
}

impl<T> ResultExt<T> for Result<T, sqlx::Error> {
    fn port(self) -> Result<T, PortError> {
        self.map_err(port_error)
    }
}
