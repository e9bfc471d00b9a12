-- Nothing to undo: 000067's down drops the column.
SELECT 1;
