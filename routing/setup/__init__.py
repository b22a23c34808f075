"""The setup session: trace (a dry run of routing), the impact preview of a candidate, and
candidate configurations beside the live one."""
