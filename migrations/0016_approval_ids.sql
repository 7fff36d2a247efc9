-- Approval ids are random (52 bits above 2^32, drawn by the store from the
-- operating system's source), no longer a sequence a page could count
-- through: the column takes the id each insert gives it.
ALTER TABLE approvals ALTER COLUMN id DROP IDENTITY;
