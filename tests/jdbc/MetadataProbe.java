import java.sql.Array;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Types;
import java.util.logging.Logger;

/**
 * Calls the PostgreSQL JDBC driver's DatabaseMetaData methods a generic SQL tool calls when it opens a
 * database and a table, then runs a PreparedStatement with a parameter, fetched through a cursor (fetch
 * size 10 inside a transaction). Each call is one section, so one failing call does not hide the others.
 *
 * <p>Output, one line each, fields separated by tabs (a tab, newline or backslash in a value is written
 * as \t, \n or \\; SQL NULL as \N):
 * <pre>
 *   SECTION  row  LABEL=VALUE ...      one row of the call's result set, every column by its label
 *   SECTION  done  N                   the call returned N rows
 *   SECTION  error  SQLSTATE  MESSAGE  the call threw
 * </pre>
 * Each section also writes "probe section NAME" to the driver's logger (org.postgresql), so a test that
 * logs the driver's messages can tell which SQL each call sent.
 *
 * <p>Usage: MetadataProbe URL USER PASSWORD QUERY LONG_PARAMETER
 */
public class MetadataProbe {
    private static final Logger LOG = Logger.getLogger("org.postgresql.MetadataProbe");

    interface Call {
        ResultSet run() throws SQLException;
    }

    static String escape(String s) {
        if (s == null) {
            return "\\N";
        }
        return s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r");
    }

    /** A value as text: numbers through the JDBC getter of their type, arrays as {a,b}. */
    static String value(ResultSet rs, int i, int type) throws SQLException {
        switch (type) {
            case Types.BIGINT:
            case Types.INTEGER:
            case Types.SMALLINT:
            case Types.TINYINT: {
                long v = rs.getLong(i);
                return rs.wasNull() ? null : Long.toString(v);
            }
            case Types.DOUBLE:
            case Types.FLOAT:
            case Types.REAL: {
                double v = rs.getDouble(i);
                return rs.wasNull() ? null : Double.toString(v);
            }
            case Types.BIT:
            case Types.BOOLEAN: {
                boolean v = rs.getBoolean(i);
                return rs.wasNull() ? null : Boolean.toString(v);
            }
            case Types.ARRAY: {
                Array a = rs.getArray(i);
                if (a == null) {
                    return null;
                }
                StringBuilder sb = new StringBuilder("{");
                Object[] items = (Object[]) a.getArray();
                for (int k = 0; k < items.length; k++) {
                    sb.append(k == 0 ? "" : ",").append(items[k] == null ? "NULL" : items[k].toString());
                }
                return sb.append("}").toString();
            }
            default:
                return rs.getString(i);
        }
    }

    static void dump(String section, Call call) {
        LOG.fine("probe section " + section);
        int n = 0;
        try (ResultSet rs = call.run()) {
            ResultSetMetaData md = rs.getMetaData();
            while (rs.next()) {
                StringBuilder line = new StringBuilder(section).append("\trow");
                for (int i = 1; i <= md.getColumnCount(); i++) {
                    line.append('\t').append(md.getColumnLabel(i)).append('=');
                    line.append(escape(value(rs, i, md.getColumnType(i))));
                }
                System.out.println(line);
                n++;
            }
            System.out.println(section + "\tdone\t" + n);
        } catch (SQLException e) {
            System.out.println(section + "\terror\t" + e.getSQLState() + "\t" + escape(e.getMessage()));
        }
    }

    public static void main(String[] args) throws Exception {
        String url = args[0];
        String query = args[3];
        long parameter = Long.parseLong(args[4]);
        try (Connection con = DriverManager.getConnection(url, args[1], args[2])) {
            DatabaseMetaData md = con.getMetaData();
            System.out.println("product\trow\tname=" + escape(md.getDatabaseProductName())
                    + "\tversion=" + escape(md.getDatabaseProductVersion())
                    + "\tmajor=" + md.getDatabaseMajorVersion());
            dump("tables", () -> md.getTables(null, "public", "%", null));
            dump("tables_view", () -> md.getTables(null, "public", "%", new String[] {"VIEW"}));
            dump("tables_table", () -> md.getTables(null, "public", "%", new String[] {"TABLE"}));
            dump("columns", () -> md.getColumns(null, "public", "stats", "%"));
            dump("primary_keys", () -> md.getPrimaryKeys(null, "public", "stats"));
            dump("imported_keys", () -> md.getImportedKeys(null, "public", "stats"));
            dump("exported_keys", () -> md.getExportedKeys(null, "public", "stats"));
            dump("index_info", () -> md.getIndexInfo(null, "public", "stats", false, true));
            dump("type_info", () -> md.getTypeInfo());
            dump("functions_public", () -> md.getFunctions(null, "public", "%"));
            dump("functions_version", () -> md.getFunctions(null, "pg_catalog", "version"));
            dump("schemas", () -> md.getSchemas());
            dump("catalogs", () -> md.getCatalogs());

            // A cursor-based fetch: pgjdbc fetches 10 rows at a time only inside a transaction.
            con.setAutoCommit(false);
            try (PreparedStatement ps = con.prepareStatement(query)) {
                ps.setFetchSize(10);
                ps.setLong(1, parameter);
                dump("query", ps::executeQuery);
                dump("query_again", ps::executeQuery);  // the same prepared statement, run twice
            }
            LOG.fine("probe section commit");
            try {
                con.commit();
                System.out.println("commit\tdone\t0");
            } catch (SQLException e) {
                System.out.println("commit\terror\t" + e.getSQLState() + "\t" + escape(e.getMessage()));
            }
        }
    }
}
