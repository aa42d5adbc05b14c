"""The merge pipeline: merge queue, mechanical tier, refinery."""
