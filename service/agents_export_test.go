package service

// ReportPath exports reportPath to the external tests, which check the
// mapping from status reports to lifecycle moves as a pure function.
var ReportPath = reportPath
