import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;

/** Connects to `dumpcat serve` with the PostgreSQL JDBC driver: lists tables and columns, runs a query. */
public class CatalogProbe {
    public static void main(String[] args) throws Exception {
        String url = args[0];
        try (Connection con = DriverManager.getConnection(url, args[1], args[2])) {
            DatabaseMetaData md = con.getMetaData();
            System.out.println("product " + md.getDatabaseProductName() + " " + md.getDatabaseProductVersion());
            try (ResultSet rs = md.getTables(null, "public", "%", new String[] {"VIEW"})) {
                while (rs.next()) {
                    System.out.println("view " + rs.getString("TABLE_NAME"));
                }
            }
            try (ResultSet rs = md.getColumns(null, "public", "stats", "%")) {
                while (rs.next()) {
                    System.out.println("column " + rs.getString("COLUMN_NAME") + " " + rs.getString("TYPE_NAME"));
                }
            }
            try (PreparedStatement ps = con.prepareStatement(
                    "SELECT op_name, nan_count, max FROM stats WHERE nan_count > ? ORDER BY op_name LIMIT 5")) {
                ps.setInt(1, 0);
                try (ResultSet rs = ps.executeQuery()) {
                    while (rs.next()) {
                        System.out.println("row " + rs.getString(1) + " " + rs.getLong(2) + " " + rs.getDouble(3));
                    }
                }
            }
        }
    }
}
