import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.HexFormat;
import java.util.List;

/**
 * Sends hostile statements to `dumpcat serve` with the PostgreSQL JDBC driver, one per line of a
 * file (hex-encoded UTF-8), each as a plain statement and as a prepared one; prints "ok" or
 * "err SQLSTATE" per attempt, then proves the session still answers.
 */
public class HostileProbe {
    public static void main(String[] args) throws Exception {
        List<String> lines = Files.readAllLines(Paths.get(args[3]), StandardCharsets.US_ASCII);
        try (Connection con = DriverManager.getConnection(args[0], args[1], args[2])) {
            con.setAutoCommit(true);
            for (String hex : lines) {
                String sql = new String(HexFormat.of().parseHex(hex), StandardCharsets.UTF_8);
                try (Statement st = con.createStatement()) {
                    st.execute(sql);
                    System.out.println("ok");
                } catch (SQLException e) {
                    System.out.println("err " + e.getSQLState());
                }
                try (PreparedStatement ps = con.prepareStatement(sql)) {
                    ps.execute();
                    System.out.println("ok");
                } catch (SQLException e) {
                    System.out.println("err " + e.getSQLState());
                }
                try (Statement st = con.createStatement()) {
                    st.execute("ROLLBACK"); // "BEGIN; <refused>; COMMIT" leaves a block open, as in PostgreSQL
                }
            }
            try (Statement st = con.createStatement()) {
                st.execute("SELECT 1");
                System.out.println("alive");
            }
        }
    }
}
