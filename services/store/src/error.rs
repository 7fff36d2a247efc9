//! From sqlx errors to port errors, by what the caller can do next.

use sqlx::error::ErrorKind;
use trawl_core::ports::PortError;

/// SQLite primary result codes that mean the file itself cannot be read.
const SQLITE_CORRUPT: i64 = 11;
const SQLITE_NOTADB: i64 = 26;

/// Maps a sqlx error:
///
/// - decode failures and a damaged file are [`PortError::Corrupt`];
/// - a missing referenced row (foreign key) is [`PortError::NotFound`];
/// - any other constraint violation is [`PortError::Corrupt`]: the input contradicts
///   what is stored, and trying again cannot help;
/// - everything else (I/O, a busy database, a closed or exhausted pool) is
///   [`PortError::Unavailable`]: the caller may try again.
pub(crate) fn port_error(e: sqlx::Error) -> PortError {
    match &e {
        sqlx::Error::Decode(_)
        | sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::TypeNotFound { .. }
        | sqlx::Error::RowNotFound => PortError::Corrupt(e.to_string()),
        sqlx::Error::Database(db) => match db.kind() {
            ErrorKind::ForeignKeyViolation => PortError::NotFound(e.to_string()),
            ErrorKind::UniqueViolation
            | ErrorKind::NotNullViolation
            | ErrorKind::CheckViolation => PortError::Corrupt(e.to_string()),
            _ => {
                let primary = db
                    .code()
                    .and_then(|c| c.parse::<i64>().ok())
                    .map(|c| c & 0xff);
                match primary {
                    Some(SQLITE_CORRUPT | SQLITE_NOTADB) => PortError::Corrupt(e.to_string()),
                    _ => PortError::Unavailable(e.to_string()),
                }
            }
        },
        _ => PortError::Unavailable(e.to_string()),
    }
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
